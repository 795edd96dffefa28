#pragma once
// How an example model reports progress to its relay (README, "Progress"): POST a small JSON
// object to the URL the relay sent in the request's Relay-Progress-URL header. Plain HTTP on
// loopback, synchronous, a second at most: progress is advisory, the work goes on regardless.

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <string>

namespace relay::examples {

// The HTTP status of the relay's answer (204 while the job runs, 404 once it ended), 0 if none.
inline unsigned report_progress(const std::string& url, double fraction,
                                const std::string& message) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  using tcp = boost::asio::ip::tcp;
  if (!url.starts_with("http://")) return 0;
  const std::string rest = url.substr(7);
  const auto slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const auto colon = hostport.rfind(':');
  if (slash == std::string::npos || colon == std::string::npos) return 0;
  try {
    boost::asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(boost::asio::ip::make_address(hostport.substr(0, colon)),
                            static_cast<unsigned short>(std::stoi(hostport.substr(colon + 1)))));
    // Synchronous reads and writes give up after a second (the relay answers at once).
    timeval second{1, 0};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &second, sizeof second);
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &second, sizeof second);
    http::request<http::string_body> req{http::verb::post, rest.substr(slash), 11};
    req.set(http::field::host, hostport);
    req.set(http::field::content_type, "application/json");
    req.body() =
        boost::json::serialize(boost::json::object{{"progress", fraction}, {"message", message}});
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    http::read(s, b, res);
    return res.result_int();
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace relay::examples
