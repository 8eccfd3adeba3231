// A Batch API input file (JSONL, uploaded with purpose "batch"): one
// request per line, {"custom_id", "method": "POST", "url", "body"}, as
// OpenAI's Batch API takes it. Read and checked when the file is uploaded,
// so that a bad file is refused at once with the numbers of its bad lines
// (OpenAI reports them later, in the batch's errors; ropeserve refuses the
// upload instead: nothing is queued that cannot run).
//
// What is checked here: the line is a JSON object with exactly these four
// fields, custom_id a non-empty string unique in the file, method POST,
// url one of kBatchEndpoints, body an object that the endpoint's own
// request reader accepts (`check_body`, the same reader online requests go
// through). What needs the model (prompt length, the model's name) is
// checked when the line runs; a line that fails then is reported in the
// batch's error file.
//
// Torch-free and model-free.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::batch {

// The endpoints a batch line may call.
inline constexpr const char* kBatchEndpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                                  "/v1/summarize", "/v1/qa"};

struct BatchLine {
  std::size_t number = 0;  // 1-based line number in the file
  std::string custom_id;
  std::string url;
  std::string body;  // the body's JSON text
};

struct BatchInputLimits {
  std::size_t max_lines = 50000;         // OpenAI's limit per batch
  std::size_t max_line_bytes = 1 << 20;  // serve --max-body-bytes: a line is one request body
};

// Reads the file. `check_body(url, body)` is the endpoint's request reader.
// InvalidArgument listing up to 10 bad lines ("line 3: ..."), param "file".
using BodyCheck = std::function<Status(const std::string& url, const std::string& body)>;
StatusOr<std::vector<BatchLine>> ReadBatchInput(std::string_view content, const BatchInputLimits& limits,
                                                const BodyCheck& check_body);

}  // namespace ropeserve::batch
