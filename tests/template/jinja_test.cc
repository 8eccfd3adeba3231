// Jinja semantics the chat templates of real models rely on. Expected
// strings follow Jinja2 as configured by transformers (trim_blocks,
// lstrip_blocks, no autoescape).
#include "server/template/jinja.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ropeserve::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string R(const std::string& src, const json& ctx = json::object()) {
  auto t = Template::Parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  auto r = (*t)->Render(ctx);
  if (!r.ok()) return "RENDER ERROR: " + r.status().message();
  return *r;
}

TEST(Jinja, TextExpressionsAndOperators) {
  EXPECT_EQ(R("a{{ 1 + 2 * 3 }}b"), "a7b");
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"), "3 -4 1 3.5 1024");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(R("{{ 'x' * 3 }}"), "xxx");
  EXPECT_EQ(R("{{ true }} {{ none }} {{ 1.0 }} {{ 0.1 + 0.2 }}"), "True None 1.0 0.30000000000000004");
  EXPECT_EQ(R("{{ undefined_name }}|"), "|");
  EXPECT_EQ(R("{{ 'yes' if x else 'no' }}", {{"x", 0}}), "no");
  EXPECT_EQ(R("{{ 'yes' if x }}|", {{"x", false}}), "|");
  EXPECT_EQ(R("{{ [1, 2] + [3] }}"), "[1, 2, 3]");
  EXPECT_EQ(R("{{ {'a': 'b'} }}"), "{'a': 'b'}");
  EXPECT_EQ(R("{{ 'ab' 'cd' }}"), "abcd");
  EXPECT_EQ(R("{{ \"it's\" }} {{ 'say \\\"hi\\\"\\n' }}"), "it's say \"hi\"\n");
}

TEST(Jinja, FilterBindsTighterThanPlus) {
  EXPECT_EQ(R("{{ 'a' + '  b  ' | trim + 'c' }}"), "abc");
  EXPECT_EQ(R("{{ not x is defined }}"), "True");
  EXPECT_EQ(R("{{ x is not none and x|length > 1 }}", {{"x", "ab"}}), "True");
}

TEST(Jinja, WhitespaceControlAndTrimBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks drops
  // indentation before it.
  EXPECT_EQ(R("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");
  EXPECT_EQ(R("a\n    {% if true %}b{% endif %}\n"), "a\nb");
  EXPECT_EQ(R("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(R("{{- ' x ' -}}\n\n"), " x ");
  EXPECT_EQ(R("a {{ 1 }}\n{# comment #}\nb"), "a 1\nb");
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(R("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(Jinja, ForLoopVariablesFiltersAndElse) {
  json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}{{ loop.first }}{{ loop.last }}{{ "
              "loop.revindex }};{% endfor %}",
              ctx),
            "10aTrueFalse3;21bFalseFalse2;32cFalseTrue1;");
  EXPECT_EQ(R("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.length }}{% endfor %}", ctx), "1a22c2");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% if x == 'c' %}{% break %}{% endif "
              "%}{% endfor %}",
              ctx),
            "ac");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"z", 1}, {"a", 2}}}}), "z=1,a=2,");
  EXPECT_EQ(R("{% for x in xs %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }}|{% endfor %}", ctx),
            "bo|ace|bo|");
}

TEST(Jinja, ScopingAndNamespace) {
  // A set inside a loop does not leak out; namespace attributes do.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = 5 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(
      R("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
      "6");
  EXPECT_EQ(R("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(R("{% set block %}in {{ 1 }}{% endset %}[{{ block }}]"), "[in 1]");
}

TEST(Jinja, StringMethodsLikePython) {
  EXPECT_EQ(R("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nhi'.lstrip('\\n') }}|{{ 'hi  '.rstrip() }}"),
            "a b|a|hi|hi");
  EXPECT_EQ(R("{{ 'a</think>b</think>c'.split('</think>')[-1] }}"), "c");
  EXPECT_EQ(R("{{ ' a  b '.split() }}"), "['a', 'b']");
  EXPECT_EQ(R("{{ 'a,b,c'.split(',', 1) }}"), "['a', 'b,c']");
  EXPECT_EQ(R("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}"), "TrueTrue");
  EXPECT_EQ(R("{{ 'hello world'.title() }} {{ 'ABC'.lower() }} {{ 'abc'.upper() }} {{ 'hELLO'.capitalize() }}"),
            "Hello World abc ABC Hello");
  EXPECT_EQ(R("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.find('c') }} {{ ', '.join(['a', 'b']) }}"), "bba 2 a, b");
  EXPECT_EQ(R("{{ 'héllo'[1] }}{{ 'héllo'[::-1] }}{{ 'abcdef'[1:4] }}{{ 'abc'[-2:] }}"), "éolléhbcdbc");
}

TEST(Jinja, ListsDictsAndSlices) {
  json ctx = {{"m", {{{"role", "system"}}, {{"role", "user"}}, {{"role", "assistant"}}}}};
  EXPECT_EQ(R("{% for x in m[1:] %}{{ x.role }},{% endfor %}", ctx), "user,assistant,");
  EXPECT_EQ(R("{% for x in m[::-1] %}{{ x['role'] }},{% endfor %}", ctx), "assistant,user,system,");
  EXPECT_EQ(R("{{ m[-1].role }} {{ m | length }} {{ m[5] is defined }}", ctx), "assistant 3 False");
  EXPECT_EQ(R("{{ (m | selectattr('role', 'equalto', 'user') | list | length) }}", ctx), "1");
  EXPECT_EQ(R("{{ m | map(attribute='role') | join('/') }}", ctx), "system/user/assistant");
  EXPECT_EQ(R("{{ m | rejectattr('role', 'in', ['user', 'system']) | map(attribute='role') | first }}", ctx),
            "assistant");
  EXPECT_EQ(R("{{ 'role' in m[0] }} {{ 'x' in m[0] }} {{ 'b' in 'abc' }} {{ 2 not in [1, 2] }}", ctx),
            "True False True False");
  EXPECT_EQ(R("{{ d.get('a') }} {{ d.get('zz', 'def') }} {{ d.keys() | list }}", {{"d", {{"a", 1}}}}), "1 def ['a']");
  EXPECT_EQ(R("{% set l = [] %}{% set _ = l.append(3) %}{{ l }}"), "[3]");
  EXPECT_EQ(R("{{ [3, 1, 2] | sort | list }} {{ [1, 1, 2] | unique | list }} {{ [1, 2] | reverse | list }} {{ [1, 2, "
              "3] | sum }}"),
            "[1, 2, 3] [1, 2] [2, 1] 6");
}

TEST(Jinja, TestsAndFilters) {
  EXPECT_EQ(
      R("{{ x is string }}{{ x is mapping }}{{ y is iterable }}{{ n is number }}{{ n is integer }}{{ none is none }}",
        {{"x", "s"}, {"y", json::array()}, {"n", 3}}),
      "TrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is sameas 1 }}"), "TrueTrueTrueTrue");
  EXPECT_EQ(R("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ 'x' | default('f') }}"), "d e x");
  EXPECT_EQ(R("{{ ['a', 'b'] | first }}{{ ['a', 'b'] | last }}{{ 'abc' | length }}{{ 'a' | upper }}"), "ab3A");
  EXPECT_EQ(R("{{ 3.7 | int }} {{ '12' | int }} {{ 2 | float }} {{ -3 | abs }}"), "3 12 2.0 3");
  EXPECT_EQ(R("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
}

TEST(Jinja, ToJsonMatchesTransformers) {
  json ctx = {
      {"t", {{"name", "get_weather"}, {"args", {{"city", "Zürich"}, {"n", 1.5}, {"ok", true}, {"none", nullptr}}}}}};
  EXPECT_EQ(R("{{ t | tojson }}", ctx),
            "{\"name\": \"get_weather\", \"args\": {\"city\": \"Zürich\", \"n\": 1.5, \"ok\": true, \"none\": null}}");
  EXPECT_EQ(R("{{ [1, 'a<b>'] | tojson(indent=2) }}"), "[\n  1,\n  \"a<b>\"\n]");
  EXPECT_EQ(R("{{ {} | tojson }}{{ [] | tojson }}{{ 'q\"\\n' | tojson }}"), "{}[]\"q\\\"\\n\"");
}

TEST(Jinja, MacrosAndCalls) {
  EXPECT_EQ(R("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', "
              "punct='?') }}"),
            "Hi A! Hi B?");
  EXPECT_EQ(R("{% set x = 5 %}{% macro show() %}{{ x }}{% endmacro %}{{ show() }}"), "5");
  EXPECT_EQ(R("{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 7, 2) | list }}"), "012[1, 3, 5]");
  EXPECT_EQ(R("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(Jinja, RaiseExceptionIsFailedPreconditionWithMessage) {
  auto t = Template::Parse("{% if x %}{{ raise_exception('bad role: ' + x) }}{% endif %}ok");
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Render({{"x", "tool"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "bad role: tool");
  EXPECT_EQ(*(*t)->Render(json::object()), "ok");
}

TEST(Jinja, UnsupportedConstructsFailAtParseTimeWithLine) {
  for (const char* bad : {"{% for x in y %}", "{% if x %}{% endfor %}", "{{ x | no_such_filter }}",
                          "a\n{{ x is no_such_test }}", "{% include 'x' %}", "{{ 'unterminated }}", "{{ 1 + }}",
                          "{% raw %}x{% endraw %}", "{{ x", "{% endif %}", "{{ (1, }}"}) {
    auto t = Template::Parse(bad);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find("line "), std::string::npos) << t.status().message();
    }
  }
}

TEST(Jinja, RuntimeErrorsAreStatusNotCrashes) {
  for (const char* bad : {"{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 'a' - 1 }}", "{{ [1] < 'a' }}", "{{ x() }}",
                          "{% for x in 5 %}{% endfor %}", "{{ 'a'.nope() }}", "{{ range(0, 1, 0) }}"}) {
    auto t = Template::Parse(bad);
    ASSERT_TRUE(t.ok()) << bad << ": " << t.status().message();
    auto r = (*t)->Render(json::object());
    EXPECT_FALSE(r.ok()) << bad;
  }
}

// The DeepSeek-R1 distill template (published in the model's
// tokenizer_config.json; copied from llama.cpp's models/templates): uses
// namespace(), split()[-1], `is not none` and whitespace control.
TEST(Jinja, DeepSeekR1StyleTemplate) {
  const std::string src =
      "{% if not add_generation_prompt is defined -%}\n  {%- set add_generation_prompt = false -%}\n{%- endif -%}\n"
      "{%- set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') -%}\n"
      "{%- for message in messages -%}\n  {%- if message['role'] == 'system' -%}\n"
      "    {%- set ns.system_prompt = message['content'] -%}\n  {%- endif -%}\n{%- endfor "
      "-%}{{bos_token}}{{ns.system_prompt}}\n"
      "{%- for message in messages -%}\n  {%- if message['role'] == 'user' -%}\n"
      "    {%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}\n  {%- endif -%}\n"
      "  {%- if message['role'] == 'assistant' and message['content'] is not none -%}\n"
      "      {%- set content = message['content'] -%}\n      {%- if '</think>' in content -%}\n"
      "        {%- set content = content.split('</think>')[-1] -%}\n"
      "      {%- endif -%}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}\n  {%- endif -%}\n{%- endfor -%}\n"
      "{%- if add_generation_prompt and not ns.is_tool -%}{{'<｜Assistant｜><think>\\n'}}\n{%- endif %}";
  json ctx = {{"bos_token", "<s>"},
              {"add_generation_prompt", true},
              {"messages",
               {{{"role", "system"}, {"content", "Be brief."}},
                {{"role", "user"}, {"content", "Hi"}},
                {{"role", "assistant"}, {"content", "<think>hmm</think>Hello!"}},
                {{"role", "user"}, {"content", "Bye"}}}}};
  EXPECT_EQ(R(src, ctx),
            "<s>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n");
}

}  // namespace
}  // namespace ropeserve::jinja

namespace ropeserve::jinja {
namespace {

// Found by template_fuzz: deep nesting overflowed the parser's stack.
TEST(Jinja, NestingAndWorkAreBounded) {
  EXPECT_NE(R("{{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(R("{{ " + std::string(3000, '{') + " }}").find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(R("{{ " + std::string(3000, '[') + " }}").find("PARSE ERROR"), std::string::npos);
  std::string ifs;
  for (int k = 0; k < 500; ++k) ifs += "{% if true %}";
  EXPECT_NE(R(ifs).find("nested too deeply"), std::string::npos);
  EXPECT_NE(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursed too deeply"), std::string::npos);
  EXPECT_NE(R("{% for i in range(5000) %}{% for j in range(5000) %}x{% endfor %}{% endfor %}").find("RENDER ERROR"),
            std::string::npos);
  EXPECT_EQ(R(std::string(150, '(') == "" ? "" : "{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"),
            "1");
}

}  // namespace
}  // namespace ropeserve::jinja

namespace ropeserve::jinja {
namespace {

// The constructs of Qwen3's template (reasoning content, reversed scan for
// the last user query, namespace flags, chained string methods).
TEST(Jinja, Qwen3StyleTemplate) {
  const std::string src = R"({%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})";
  json ctx = {{"add_generation_prompt", true},
              {"enable_thinking", false},
              {"messages",
               {{{"role", "user"}, {"content", "Hi"}},
                {{"role", "assistant"}, {"content", "<think>\nplan\n</think>\n\nHello!"}},
                {{"role", "user"}, {"content", "Bye"}}}}};
  EXPECT_EQ(R(src, ctx),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // The last assistant turn after the last user query keeps its reasoning.
  ctx["messages"] = {{{"role", "user"}, {"content", "Hi"}},
                     {{"role", "assistant"}, {"content", "<think>\nplan\n</think>\n\nHello!"}}};
  ctx["add_generation_prompt"] = false;
  EXPECT_EQ(R(src, ctx),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nHello!<|im_end|>\n");
}

}  // namespace
}  // namespace ropeserve::jinja
