#!/usr/bin/python3
"""Tink's AES-GCM-HKDF streaming format written from its specification with Debian's
python3-cryptography (HKDF + AESGCM): an implementation independent of Relay's C++, for the
interoperability tests.

usage: tink_stream.py encrypt|decrypt KEY_HEX AAD SEGMENT_SIZE < input > output"""
import os
import struct
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

TAG = 16
PREFIX = 7


def derive(key, salt, aad):
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=len(key), salt=salt, info=aad).derive(key))


def nonce(prefix, i, last):
    return prefix + struct.pack(">I", i) + bytes([1 if last else 0])


def encrypt(key, aad, seg, data):
    salt, prefix = os.urandom(len(key)), os.urandom(PREFIX)
    header_len = 1 + len(key) + PREFIX
    gcm = derive(key, salt, aad)
    out = [bytes([header_len]), salt, prefix]
    pos, i = 0, 0
    while True:
        n = seg - TAG - (header_len if i == 0 else 0)
        chunk = data[pos:pos + n]
        pos += len(chunk)
        last = pos >= len(data)
        out.append(gcm.encrypt(nonce(prefix, i, last), chunk, b""))
        i += 1
        if last:
            return b"".join(out)


def decrypt(key, aad, seg, data):
    header_len = 1 + len(key) + PREFIX
    if len(data) < header_len or data[0] != header_len:
        raise ValueError("bad header")
    salt, prefix = data[1:1 + len(key)], data[1 + len(key):header_len]
    gcm = derive(key, salt, aad)
    out, pos, i = [], header_len, 0
    while True:
        n = seg - (header_len if i == 0 else 0)
        last = len(data) - pos <= n
        chunk = data[pos:pos + n]
        out.append(gcm.decrypt(nonce(prefix, i, last), chunk, b""))
        pos += len(chunk)
        i += 1
        if last:
            return b"".join(out)


mode, key_hex, aad, seg = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
data = sys.stdin.buffer.read()
fn = encrypt if mode == "encrypt" else decrypt
sys.stdout.buffer.write(fn(bytes.fromhex(key_hex), aad, seg, data))
