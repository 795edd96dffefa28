#pragma once
// How many connections the gateway accepts at once (server.max_connections). Each costs an open
// file and memory that its client decides: a request header arrives into a buffer of up to
// server.max_header_size for as long as the header timeout allows. With only the open-file
// limit as a bound — in a container often 1,048,576, raised to it at start — a flood of slow
// headers could grow the gateway past its memory limit and have it killed, taking every
// request in progress with it; refusing connections beyond a memory-derived number keeps it
// serving the ones it holds.

#include <cstdint>
#include <string>

namespace relay::gateway {

struct ConnectionBudget {
  long max_connections = 0;
  long open_files = 0;  // the soft limit, after raising it
  // What set max_connections: "server.max_connections", "open files" or "memory".
  std::string bound;
};

struct ConnectionLimits {
  long configured = 0;       // server.max_connections (0: derive)
  long open_files = 0;       // the process's open-file limit
  long pool_threads = 0;     // each holds a Redis connection and a storage file or socket
  std::uint64_t memory = 0;  // bytes connections may take (server.connection_memory resolved)
  std::uint64_t per_connection = 0;  // what one may cost at most (connection_cost)
};

// Pure: an explicit server.max_connections is lowered only to fit the open-file limit (the
// operator's figure otherwise stands); the default is the lower of what the open files leave
// after a reserve and `memory / per_connection`.
ConnectionBudget connection_budget(const ConnectionLimits& limits);

// What one connection may cost while its header arrives: the header (server.max_header_size)
// and the coroutine, parser, stream and first buffers around it. Measured: ~20 KiB with a
// 15,000-byte partial header, ~8.5 KiB idle.
std::uint64_t connection_cost(std::uint64_t max_header_size);

// Raises the soft open-file limit to the hard one; returns the soft limit then in force.
long raise_open_file_limit();

}  // namespace relay::gateway
