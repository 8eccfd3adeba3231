// One chat choice's output, for streaming and unary alike (the chat half of
// vLLM's OutputProcessor): the reasoning split (<think>, reasoning.h), tool
// calls (tool_calls.h) and OpenAI's finish reason. A unary reply is the
// whole output fed through the same Push, so a streamed choice and a unary
// one made from the same tokens carry the same message.
//
// Thread-safety: one processor per choice, used from one thread at a time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/service/reasoning.h"
#include "server/service/tool_calls.h"

namespace ropeserve::service {

struct ChatOutputOptions {
  bool reasons = false;           // the chat template writes <think> blocks
  bool include_reasoning = true;  // false: reasoning text is dropped
  ToolRequest tools;              // choice kNone: no tool-call parsing
  ToolFormat tool_format = ToolFormat::kHermes;
};

// What a choice has to say once its output is complete (the unary message).
struct ChatMessage {
  // null (nullopt) when empty and the output can be something else than
  // content (reasoning, tool calls), as vLLM and OpenAI answer.
  std::optional<std::string> content;
  // Only meaningful with `reasons`: null when empty or not included.
  std::optional<std::string> reasoning;
  std::vector<ToolCall> calls;
  std::string finish_reason;
};

class ChatOutputProcessor {
 public:
  // `prompt`: the rendered chat prompt (a template may open <think> itself).
  ChatOutputProcessor(ChatOutputOptions options, std::string_view prompt);

  struct Delta {
    std::string reasoning;        // empty unless include_reasoning
    std::string content;          // what can be sent now (calls are held back)
    std::vector<ToolCall> calls;  // in the last delta only
    std::string finish_reason;    // in the last delta only ("tool_calls" when the model called)
  };
  // The text generated since the last Push; `finished` (with the engine's
  // finish reason) on the last one.
  Delta Push(std::string_view text, bool finished, const std::string& finish_reason);

  // A whole output as the unary reply's message: one Push, finished.
  static ChatMessage Whole(const ChatOutputOptions& options, std::string_view prompt, std::string_view text,
                           const std::string& finish_reason);

 private:
  ChatOutputOptions options_;
  ReasoningSplitter reasoning_;
  ToolCallStreamer calls_;
};

}  // namespace ropeserve::service
