// OpenAI tool calling on top of structured output, transport-independent.
//
// tool_choice decides how the calls come out of the model:
//   none      free text; the tools are still shown to the chat template;
//   auto      free text in the model family's own call format, parsed
//             afterwards (Hermes `<tool_call>{...}</tool_call>` blocks of
//             Qwen2.5/Qwen3, or Llama 3.x bare JSON `{"name", "parameters"}`);
//   required  constrained to a JSON array of {"name", "arguments"} objects
//             over the given tools (vLLM's approach: any model can comply);
//   named     constrained to the named function's arguments object.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/structured/constraint.h"

namespace ropeserve::service {

constexpr int kMaxTools = 128;

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema; null when not given (any object)
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  std::vector<ToolFunction> tools;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;     // kNamed: the function
  bool parallel = true;  // parallel_tool_calls
  bool empty() const { return tools.empty(); }
};

// Reads OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` (null or
// absent values allowed). Errors name the field (tools[2].function.name).
StatusOr<ToolRequest> ReadToolRequest(const nlohmann::ordered_json* tools, const nlohmann::ordered_json* tool_choice,
                                      const nlohmann::ordered_json* parallel_tool_calls);

// The output constraint of kRequired and kNamed (kNone otherwise).
structured::Constraint ToolConstraint(const ToolRequest& r);

// How the chat template's model writes calls in `auto` mode.
enum class ToolFormat { kHermes, kLlama3Json };
ToolFormat ToolFormatForTemplate(const std::string& chat_template);

struct ToolCall {
  std::string id;  // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON text, exactly as the model generated it
};

struct ToolOutput {
  std::optional<std::string> content;  // nullopt: only tool calls
  std::vector<ToolCall> calls;
};

// The calls in a finished output. Text that does not parse as a call stays
// content (a truncated or malformed call is returned as text, not lost).
ToolOutput ParseToolOutput(const ToolRequest& r, ToolFormat format, const std::string& text);

// Streaming in `auto` mode: content is passed through until a call may be
// starting (a possible prefix of "<tool_call>" is held back; a Llama 3
// output that starts with '{' is held whole); what follows is kept for
// Finish, which parses it.
// With tool_choice required or a named function, everything is held for
// Finish (the output is the calls).
class ToolCallStreamer {
 public:
  ToolCallStreamer(ToolRequest r, ToolFormat format);
  // The content that can be sent now.
  std::string Push(const std::string& text);
  // The calls, and the content not sent yet.
  ToolOutput Finish();

 private:
  ToolRequest request_;
  ToolFormat format_;
  std::string all_;       // everything pushed
  std::size_t sent_ = 0;  // bytes of all_ sent as content
  bool in_calls_;         // a call started: nothing more is sent
};

// Tool calls as OpenAI's message.tool_calls / delta.tool_calls entries.
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index);

// OpenAI's finish_reason once calls were parsed: "tool_calls" when the
// model chose to call (auto, required), "stop" for a forced named call;
// "length" and the others unchanged.
std::string ToolFinishReason(const ToolRequest& r, const ToolOutput& out, const std::string& finish_reason);

}  // namespace ropeserve::service
