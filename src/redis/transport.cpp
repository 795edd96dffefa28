// Connection's transport: a TCP socket, optionally TLS (OpenSSL), and hiredis's reply reader.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>

#include <vector>

#include "common/file_stamp.hpp"
#include "common/log.hpp"
#include "redis/connection_parts.hpp"

namespace relay::redis {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "TLS error" : out;
}

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};

// OpenSSL works out a certificate's extensions (its key identifiers, its flags) the first time
// a verification looks at it, and caches them in the certificate; two threads doing that at once
// may both write them, one while the other reads (a race ThreadSanitizer caught between relay
// threads connecting at once: openssl/openssl#32609, #20402). Every connection verifies against
// the context's CA certificates, so they are worked out here, once, before the context is shared:
// after that, connections only read them.
void cache_certificate_extensions(SSL_CTX* ctx) {
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i)
    if (X509* x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i)))
      X509_check_purpose(x, -1, 0);
  if (X509* own = SSL_CTX_get0_certificate(ctx)) X509_check_purpose(own, -1, 0);
  STACK_OF(X509)* chain = nullptr;
  if (SSL_CTX_get0_chain_certs(ctx, &chain) == 1)
    for (int i = 0; i < sk_X509_num(chain); ++i) X509_check_purpose(sk_X509_value(chain, i), -1, 0);
}

namespace {

std::vector<FileStamp> stamps_of(const Endpoint& ep) {
  return {stamp_of(ep.tls_ca_file), stamp_of(ep.tls_cert_file), stamp_of(ep.tls_key_file)};
}

std::shared_ptr<SSL_CTX> make_tls_context(const Endpoint& ep) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SslCtxDeleter{});
  if (!ctx) throw IoError("redis: TLS: " + ssl_errors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // Read whole TLS records (and what follows) per recv(2), not header then body: one system
  // call per reply instead of two. Buffered bytes are seen by SSL_has_pending (stale()).
  SSL_CTX_set_read_ahead(ctx.get(), 1);
  if (ep.tls_verify) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    bool ok = ep.tls_ca_file.empty()
                  ? SSL_CTX_set_default_verify_paths(ctx.get()) == 1
                  : SSL_CTX_load_verify_locations(ctx.get(), ep.tls_ca_file.c_str(), nullptr) == 1;
    if (!ok) throw IoError("redis: TLS: cannot load CA certificates: " + ssl_errors());
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  if (!ep.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), ep.tls_cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), ep.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      throw IoError("redis: TLS: cannot load the client certificate: " + ssl_errors());
  }
  cache_certificate_extensions(ctx.get());
  return ctx;
}

}  // namespace

// One SSL_CTX per distinct TLS configuration, made again when its files change: loading a CA
// bundle costs milliseconds, a connection should not pay it; but a gateway runs for months and
// its client certificate is renewed in place (cert-manager rewrites the Secret, the kubelet the
// mounted files), and a CA bundle is rotated the same way. Each new connection stats the files
// (three system calls beside a TCP and TLS handshake); connections made before keep the context
// they were made with. A set of files that cannot be loaded — a certificate written before its
// key by a tool that does not swap them at once — leaves the last good context in use, is logged
// once, and is tried again when the files change again.
std::shared_ptr<SSL_CTX> tls_context(const Endpoint& ep) {
  struct Entry {
    std::vector<FileStamp> stamps, failed;
    std::shared_ptr<SSL_CTX> ctx;
  };
  static std::mutex mu;
  static std::map<std::string, Entry> cache;
  // TLS writes may raise SIGPIPE on a connection the server closed (OpenSSL writes with
  // write(2)); every Relay process ignores it already, this makes it true for any caller.
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });
  std::string id = ep.tls_ca_file + '\n' + ep.tls_cert_file + '\n' + ep.tls_key_file + '\n' +
                   (ep.tls_verify ? "1" : "0");
  auto stamps = stamps_of(ep);
  std::lock_guard lock(mu);
  auto it = cache.find(id);
  if (it != cache.end() && (it->second.stamps == stamps || it->second.failed == stamps))
    return it->second.ctx;
  try {
    auto ctx = make_tls_context(ep);
    if (it != cache.end())
      log::info("redis TLS files changed: new connections use them",
                {{"ca_file", ep.tls_ca_file}, {"cert_file", ep.tls_cert_file}});
    cache[id] = Entry{std::move(stamps), {}, ctx};
    return ctx;
  } catch (const IoError& e) {
    if (it == cache.end()) throw;  // nothing loaded yet: the caller's error
    if (it->second.failed != stamps)
      log::warn("redis TLS files changed but cannot be loaded; still using the previous ones",
                {{"error", e.what()}});
    it->second.failed = std::move(stamps);
    return it->second.ctx;
  }
}

bool is_ip_address(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// A TCP connection to host:port within timeout; returns a blocking socket.
int tcp_connect(const Endpoint& ep) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string where = ep.host + ":" + std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
      rc != 0)
    throw IoError("redis: cannot resolve " + ep.host + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(res, &::freeaddrinfo);
  std::string last = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(ep.connect_timeout.count()));
      if (rc == 0) {
        errno = ETIMEDOUT;
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  throw IoError("redis: cannot connect to " + where + ": " + last);
}

}  // namespace relay::redis
