// The connection layer under cpp-httplib: how many connections a listener
// holds, how long a client may take to send a request, how large its head
// may be, and whether the client is still there. cpp-httplib (Debian's
// 0.11) parses and routes; its own connection loop has per-byte timeouts
// only, unbounded request lines and header counts, and an unbounded queue
// of accepted connections, so a few slow or idle clients can hold every
// worker. This layer replaces that loop (Server::process_and_close_socket)
// and the task queue:
//
//  - at most `max_connections` connections are served at once; one more
//    gets `503` with Retry-After at once, without its request being read,
//    on a thread of its own (so probes and the accept loop never wait);
//  - a request's head and body must arrive within `request_read_timeout`
//    of its first byte (a whole-request deadline, not per byte): a slow
//    sender gets 408 and is closed;
//  - a head over `max_header_bytes` or `max_headers` lines gets 431;
//  - a connection idle for `keep_alive_timeout` between requests is closed;
//  - writes that cannot progress for `write_timeout` fail (a client that
//    stops reading is dropped).
//
// Handlers run on the connection's thread and reach its state through the
// functions in `connection` (thread-local). Plain TCP and TLS (OpenSSL,
// with the SSLServer's context) share the loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace httplib {
class Server;
}

namespace ropeserve::api {

struct ConnectionLimits {
  std::size_t max_connections = 512;
  std::size_t max_header_bytes = 32 << 10;
  std::size_t max_headers = 100;
  std::chrono::milliseconds request_read_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds write_timeout{30000};
  int max_requests_per_connection = 1000;
};

// A cpp-httplib server (TLS when both PEM files are given) running on this
// layer. Its is_valid() is false when the TLS files cannot be loaded.
std::unique_ptr<httplib::Server> MakeGuardedServer(const ConnectionLimits& limits, const std::string& tls_cert,
                                                   const std::string& tls_key);

// For handlers, about the connection whose request this thread serves
// (no-ops on a thread that serves none).
namespace connection {
// The peer closed or reset the connection (a unary handler then cancels
// its work).
bool ClientGone();
// The request's body has been read: its read deadline no longer applies.
void BodyRead();
// The last read failed because the request's read deadline passed.
bool ReadTimedOut();
// Close the connection after this response (a request body left unread
// would otherwise be parsed as the next request).
void CloseAfterResponse();
}  // namespace connection

}  // namespace ropeserve::api
