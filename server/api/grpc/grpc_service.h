// gRPC API (proto/ropeserve/v1/ropeserve.proto): ropeserve.v1.Inference on
// gRPC's callback API, plus grpc.health.v1.Health and server reflection.
//
// Threading: no handler blocks a gRPC thread. Each call owns a reactor
// (grpc_calls.h); a bounded work pool (ServingContext::work_pool) tokenizes,
// validates and submits the request, the engine thread's stream
// notification pumps new output into the reactor (decode + StartWrite, both
// short), and the reactor finishes the call when the generation ends,
// fails, or the client cancels. A full pool answers RESOURCE_EXHAUSTED.
//
// Limits: per-connection concurrent streams, keepalive enforcement (pings
// more often than every 10 s without data are refused), idle connections
// closed after 10 minutes, a memory quota for the transport's buffers.
#pragma once

#include <memory>
#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

struct ServingContext;

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;  // 0 picks a free port
  std::size_t max_message_bytes = 1 << 20;
  int max_concurrent_streams = 128;  // per connection
  std::size_t memory_quota_bytes = std::size_t{256} << 20;
  // TLS when both are set (PEM files).
  std::string tls_cert;
  std::string tls_key;
};

class GrpcServer {
 public:
  // `context` must outlive the server.
  explicit GrpcServer(ServingContext& context);
  ~GrpcServer();

  // Starts listening. Non-blocking.
  Status Start(const GrpcServerOptions& options);
  // Health NOT_SERVING (drain) or SERVING.
  void SetServing(bool serving);
  // Stops accepting calls; in-flight calls get until `grace` to finish, then
  // are cancelled.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve::api
