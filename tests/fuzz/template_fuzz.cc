// libFuzzer target: arbitrary template sources parsed and rendered with a
// small conversation. Errors are fine; crashes, hangs and leaks are not.
#include <cstdint>
#include <string>

#include "server/template/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  auto t = ropeserve::jinja::Template::Parse(src);
  if (!t.ok()) return 0;
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
                 {"role": "assistant", "content": "<think>x</think>Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": [{"name": "f"}], "n": 3})");
  (void)(*t)->Render(ctx);
  return 0;
}
