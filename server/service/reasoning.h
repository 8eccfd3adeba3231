// Reasoning output split from the answer: models such as Qwen3 and
// DeepSeek-R1 write their chain of thought between <think> and </think>
// before the answer. The chat API returns that text as the message's
// `reasoning_content` and the rest as `content`, as vLLM's and SGLang's
// reasoning parsers do.
//
// Semantics (vLLM's deepseek_r1 / qwen3 parsers):
//  - the chat template decides whether the model reasons: the splitter is
//    enabled when its source mentions both tags (ForTemplate);
//  - the output is reasoning from its start when the rendered prompt ends
//    inside an open <think> (templates that open the block themselves), or
//    when the output itself begins with <think>; otherwise it is content;
//  - reasoning ends at the first </think>; the tags are dropped, the text
//    around them is kept as it is (whitespace included);
//  - an output that ends before </think> (max_tokens) is all reasoning.
// Streaming: text that could be the start of a tag is held back until the
// next Push shows it is not one (or Finish releases it).
//
// Hand-written: a two-tag state machine; no library does this.
#pragma once

#include <string>
#include <string_view>

namespace ropeserve::service {

class ReasoningSplitter {
 public:
  struct Split {
    std::string reasoning;
    std::string content;
  };
  // `prompt`: the rendered chat prompt (decides the starting state).
  explicit ReasoningSplitter(std::string_view prompt);
  // True when the template can produce reasoning blocks.
  static bool ForTemplate(std::string_view template_source);

  // The new output text in; what is now known to be reasoning or content out.
  Split Push(std::string_view text);
  // Releases anything held back (the output ended).
  Split Finish();
  // Splits a whole output at once (Push + Finish).
  Split All(std::string_view text);

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_;
  std::string pending_;  // text not yet classified (a possible tag prefix)
};

}  // namespace ropeserve::service
