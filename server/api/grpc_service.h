// gRPC API (proto/ropeserve/v1/ropeserve.proto) on the callback API.
// Threading: gRPC's callback threads run the handlers; ModelService
// serialises generation (a Generate call occupies one callback thread until
// the batching engine makes it asynchronous).
#pragma once

#include <memory>
#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

class ModelService;

class GrpcServer {
 public:
  explicit GrpcServer(ModelService& service);
  ~GrpcServer();

  // Starts listening on host:port (port 0 picks a free one). Non-blocking.
  Status Start(const std::string& host, int port);
  // Stops accepting calls and waits for in-flight ones.
  void Stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve::api
