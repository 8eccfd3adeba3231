// gRPC API (proto/ropeserve/v1/ropeserve.proto): ropeserve.v1.Inference on
// gRPC's callback API, plus grpc.health.v1.Health and server reflection.
//
// Threading: no handler blocks a gRPC thread on generation. Each call owns a
// reactor; the engine thread's stream notification pumps new output into it
// (decode + StartWrite, both short), and the reactor finishes the call when
// the generation ends, fails, or the client cancels.
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
