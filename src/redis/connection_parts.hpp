#pragma once
// Connection's private parts, shared by the translation units that implement it:
// connection.cpp (replies, endpoints, commands), transport.cpp (sockets, TLS), cluster.cpp
// (slot routing, redirects), sentinel.cpp (finding the master, following failovers).
// Nothing outside src/redis/ includes this.

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "redis/connection.hpp"

namespace relay::redis {

// transport.cpp
timeval to_timeval(std::chrono::milliseconds ms);
std::string ssl_errors();
// One SSL_CTX per distinct TLS configuration, made again when its files change.
std::shared_ptr<SSL_CTX> tls_context(const Endpoint& ep);
bool is_ip_address(const std::string& host);
// A TCP connection to ep's host:port within its connect timeout; returns a blocking socket.
int tcp_connect(const Endpoint& ep);

struct Connection::Transport {
  int fd = -1;
  std::shared_ptr<SSL_CTX> ctx;  // kept alive while ssl uses it
  SSL* ssl = nullptr;
  redisReader* reader = redisReaderCreate();

  ~Transport() {
    if (ssl) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
    if (reader) redisReaderFree(reader);
  }

  // Only what changes is set: a blocking read (BlockingRead) lifts the read timeout and puts it
  // back around each XREADGROUP, and the write timeout stays as it was.
  void set_timeouts(std::chrono::milliseconds read, std::chrono::milliseconds write) {
    timeval r = to_timeval(read), w = to_timeval(write);
    if ((read != read_timeout && ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r) != 0) ||
        (write != write_timeout && ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &w, sizeof w) != 0))
      throw IoError("redis: cannot set a timeout");
    read_timeout = read;
    write_timeout = write;
  }
  // As set on the socket (negative: not yet).
  std::chrono::milliseconds read_timeout{-1}, write_timeout{-1};

  [[noreturn]] void fail(const std::string& what, int err) {
    if (err == EAGAIN || err == EWOULDBLOCK) throw TimedOut("redis: " + what + ": timed out");
    throw IoError("redis: " + what + ": " + (err ? std::strerror(err) : "connection closed"));
  }

  void handshake(const Endpoint& ep) {
    ctx = tls_context(ep);
    ssl = SSL_new(ctx.get());
    if (!ssl || SSL_set_fd(ssl, fd) != 1) throw IoError("redis: TLS: " + ssl_errors());
    const std::string& name = ep.tls_server_name.empty() ? ep.host : ep.tls_server_name;
    if (!is_ip_address(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (ep.tls_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      bool ok = is_ip_address(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1
                                    : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0) == 1;
      if (!ok) throw IoError("redis: TLS: bad server name " + name);
    }
    ERR_clear_error();
    if (SSL_connect(ssl) != 1) {
      long verify = SSL_get_verify_result(ssl);
      std::string why = verify != X509_V_OK ? std::string("certificate verify failed: ") +
                                                  X509_verify_cert_error_string(verify)
                                            : ssl_errors();
      throw IoError("redis: TLS handshake with " + ep.host + ":" + std::to_string(ep.port) +
                    " failed: " + why);
    }
  }

  void write_all(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w;
      if (ssl) {
        ERR_clear_error();
        int rc = SSL_write(ssl, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (rc <= 0) fail("write", SSL_get_error(ssl, rc) == SSL_ERROR_SYSCALL ? errno : 0);
        w = rc;
      } else {
        w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail("write", errno);
        }
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  // Reads what is there (at least one byte) into the reply reader.
  void read_more() {
    char buf[16384];
    for (;;) {
      ssize_t n;
      if (ssl) {
        ERR_clear_error();
        int rc = SSL_read(ssl, buf, sizeof buf);
        if (rc <= 0) {
          int e = SSL_get_error(ssl, rc);
          if (e == SSL_ERROR_WANT_READ) fail("read", EAGAIN);
          fail("read", e == SSL_ERROR_SYSCALL ? errno : 0);
        }
        n = rc;
      } else {
        n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("read", n < 0 ? errno : 0);
      }
      if (redisReaderFeed(reader, buf, static_cast<size_t>(n)) != REDIS_OK)
        throw IoError("redis: protocol error: " + std::string(reader->errstr));
      return;
    }
  }

  redisReply* next_reply() {
    for (;;) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK)
        throw IoError("redis: protocol error: " + std::string(reader->errstr));
      if (reply) return static_cast<redisReply*>(reply);
      read_more();
    }
  }
};

// cluster.cpp
class SlotMap;

struct Connection::Cluster {
  Endpoint ep;
  std::shared_ptr<SlotMap> map;
  std::mutex mu;  // nodes: interrupt() runs on other threads
  std::map<std::string, Connection> nodes;
  Connection* last = nullptr;  // the node of the previous command
  std::chrono::milliseconds read_timeout = kReadTimeout;

  Connection& node(const std::string& addr);  // opened if needed
  void drop(Connection* c);                   // a failed node
  Connection& for_key(std::optional<std::string_view> key);
  // ep, its connects (a node's, a refresh's) given no longer than each reply now is: a caller
  // that can wait only so long (ReadWithin) is not held connect_timeout per silent node.
  Endpoint bounded_ep() const;
};

// sentinel.cpp: the master generation now (connections of an older one are stale).
std::uint64_t master_epoch();

}  // namespace relay::redis
