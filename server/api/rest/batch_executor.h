// What the batch runner (server/batch/batch_runner.h) needs from the API
// layer: the executor that runs a batch line through the REST handlers
// online requests use (at service::kBatchPriority, cancelled through
// RestRequest::client_gone), and the check of a line's body by its
// endpoint's request reader (also what an upload's lines go through).
#pragma once

#include <string>

#include "server/api/serving_context.h"
#include "server/batch/batch_runner.h"
#include "server/common/status.h"

namespace ropeserve::api {

// A line's outcome: status 200 and the handler's body, an error status and
// OpenAI's error body, or retry (the line was cancelled, the engine is
// overloaded or stopping). Requests are counted in /metrics with protocol
// "batch". `ctx` must outlive the executor.
batch::LineExecutor BatchLineExecutor(ServingContext& ctx);

// The body of a batch line to `url`, read by that endpoint's reader;
// streaming and background runs are refused (rest_files.cc).
Status CheckBatchBody(const std::string& url, const std::string& body);

}  // namespace ropeserve::api
