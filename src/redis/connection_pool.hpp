#pragma once
// Connections shared by a pool of threads (the gateway's request and storage pools): a request
// borrows one for its duration and the lease gives it back. As many are open as were ever in
// use at once — at most one per thread — and they belong to this pool's endpoint alone.
//
// A connection whose scope ends by an exception is dropped, not given back: a command cut
// short may leave its reply in flight, which the next user would read as its own.

#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "redis/connection.hpp"

namespace relay::redis {

class ConnectionPool {
 public:
  explicit ConnectionPool(Endpoint ep) : ep_(std::move(ep)) {}
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  class Lease {
   public:
    Lease(Lease&& o) noexcept
        : pool_(o.pool_), conn_(std::move(o.conn_)), exceptions_(o.exceptions_) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (!conn_) return;
      if (std::uncaught_exceptions() > exceptions_) return;  // dropped: see above
      pool_->give_back(std::move(conn_));
    }
    LazyConnection& operator*() const { return *conn_; }
    LazyConnection* operator->() const { return conn_.get(); }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<LazyConnection> conn)
        : pool_(pool), conn_(std::move(conn)), exceptions_(std::uncaught_exceptions()) {}
    ConnectionPool* pool_;
    std::unique_ptr<LazyConnection> conn_;
    int exceptions_;
  };

  // An idle connection (opened on first use), or a new one.
  Lease borrow() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(c));
      }
    }
    return Lease(this, std::make_unique<LazyConnection>(ep_));
  }

  std::size_t idle() const {
    std::lock_guard lock(mu_);
    return idle_.size();
  }

 private:
  void give_back(std::unique_ptr<LazyConnection> c) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(c));
  }

  Endpoint ep_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<LazyConnection>> idle_;
};

}  // namespace relay::redis
