// `ropeserve serve`: the server built from one ServeConfig. Start-up order:
// HTTP and gRPC listen first (/health answers, /ready is 503 and gRPC
// health NOT_SERVING while the models load), then the models, tokenizers
// and engine load and the server turns ready. SIGTERM/SIGINT drains: not
// ready, new work refused (503 / UNAVAILABLE), in-flight requests finish
// within shutdown_timeout, and RunServer returns. A second signal exits at
// once.
//
// server/app/ is the composition root above the transports: it joins the
// API layer (server/api/), the models and services (server/serving/), the
// data directory and the KV events publisher. The CLI only parses flags
// into a ServeConfig (server/cli/serve_command.cc).
#pragma once

#include "server/app/serve_config.h"
#include "server/common/status.h"

namespace ropeserve::app {

// Validates `config` (ValidateServeConfig), serves until a stop signal, and
// drains. An error when the server cannot start or a listener failed; its
// message says why, for the operator.
Status RunServer(ServeConfig config);

}  // namespace ropeserve::app
