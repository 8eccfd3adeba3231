#include "server/service/chat_output.h"

#include <utility>

namespace ropeserve::service {

ChatOutputProcessor::ChatOutputProcessor(ChatOutputOptions options, std::string_view prompt)
    : options_(std::move(options)), reasoning_(prompt), calls_(options_.tools, options_.tool_format) {}

ChatOutputProcessor::Delta ChatOutputProcessor::Push(std::string_view text, bool finished,
                                                     const std::string& finish_reason) {
  Delta out;
  ReasoningSplitter::Split split{"", std::string(text)};
  if (options_.reasons) {
    split = reasoning_.Push(text);
    if (finished) {
      ReasoningSplitter::Split rest = reasoning_.Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    if (options_.include_reasoning) out.reasoning = std::move(split.reasoning);
  }
  out.content = calls_.Push(split.content);
  if (finished) {
    ToolOutput rest = calls_.Finish();
    out.content += rest.content.value_or("");
    out.finish_reason = ToolFinishReason(options_.tools, rest, finish_reason);
    out.calls = std::move(rest.calls);
  }
  return out;
}

ChatMessage ChatOutputProcessor::Whole(const ChatOutputOptions& options, std::string_view prompt, std::string_view text,
                                       const std::string& finish_reason) {
  ChatOutputProcessor p(options, prompt);
  Delta d = p.Push(text, /*finished=*/true, finish_reason);
  ChatMessage m;
  const bool content_can_be_null = options.reasons || options.tools.choice != ToolChoice::kNone;
  if (!d.content.empty() || !content_can_be_null) m.content = std::move(d.content);
  if (!d.reasoning.empty()) m.reasoning = std::move(d.reasoning);
  m.calls = std::move(d.calls);
  m.finish_reason = std::move(d.finish_reason);
  return m;
}

}  // namespace ropeserve::service
