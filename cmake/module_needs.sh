#!/bin/sh
# usage: module_needs.sh NM MODULE LIBSTDCXX_A OUT_PREFIX
# What a host linking libstdc++ statically (the relay) must carry and export for relay-s3.so:
# the module has no libstdc++ of its own (linked with -nodefaultlibs) and takes the process's.
# Writes OUT_PREFIX.undefined (ld options, one `-u SYMBOL` each: pull these in from libstdc++.a
# even where the relay does not use them) and OUT_PREFIX.dynlist (a dynamic list exporting them,
# and nothing else of the relay's).
set -eu
nm=$1 module=$2 stdcxx=$3 out=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nm" -g --defined-only "$stdcxx" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/defined"
"$nm" -D --undefined-only "$module" | awk '{ sub(/@.*/, "", $2); print $2 }' | sort -u >"$tmp/wanted"
comm -12 "$tmp/defined" "$tmp/wanted" >"$tmp/needs"
[ -s "$tmp/needs" ] || { echo "module_needs.sh: $module needs nothing from $stdcxx?" >&2; exit 1; }
sed 's/^/-u /' "$tmp/needs" >"$out.undefined.tmp"
{ echo "{"; sed 's/.*/  &;/' "$tmp/needs"; echo "};"; } >"$out.dynlist.tmp"
mv "$out.undefined.tmp" "$out.undefined"
mv "$out.dynlist.tmp" "$out.dynlist"
