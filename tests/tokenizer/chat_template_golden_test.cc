// Every real template x conversation of the reference renders exactly as
// @huggingface/jinja rendered it, or raises the same error.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "server/template/chat_template.h"

namespace ropeserve {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, RendersLikeReference) {
  const std::string data = ROPESERVE_TEST_DATA;
  const nlohmann::ordered_json golden = nlohmann::ordered_json::parse(ReadText(data + "/golden/chat_templates.json"));
  const nlohmann::ordered_json ctx = golden["meta"]["context"];
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 " / add_generation_prompt=" + c["add_generation_prompt"].dump());
    auto t = ChatTemplate::FromSource(ReadText(data + "/chat_templates/" + name));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ChatTemplateOptions o;
    o.add_generation_prompt = c["add_generation_prompt"];
    o.bos_token = ctx["bos_token"];
    o.eos_token = ctx["eos_token"];
    o.extra = {{"date_string", ctx["date_string"]}};
    auto r = t->Render(c["messages"], o);
    if (c.contains("error")) {
      ASSERT_FALSE(r.ok()) << "rendered instead of raising: " << *r;
      EXPECT_EQ(r.status().code(), ErrorCode::kFailedPrecondition);
      EXPECT_EQ(r.status().message(), c["error"].get<std::string>());
    } else {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(*r, c["rendered"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

}  // namespace
}  // namespace ropeserve
