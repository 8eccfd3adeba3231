// JSON Schemas compiled to automata: what they accept, checked against
// hand-written valid and invalid documents and, for numeric ranges,
// exhaustively against the bounds.
#include "server/structured/json_schema.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ropeserve::structured {
namespace {

using json = nlohmann::ordered_json;

Dfa CompileSchema(const std::string& schema) {
  auto e = JsonSchemaExpr(json::parse(schema));
  EXPECT_TRUE(e.ok()) << schema << ": " << e.status().message();
  auto d = Dfa::Compile(*e);
  EXPECT_TRUE(d.ok()) << schema << ": " << d.status().message();
  return std::move(*d);
}

struct Case {
  const char* schema;
  std::vector<const char*> yes, no;
};

void Check(const Case& c) {
  const Dfa d = CompileSchema(c.schema);
  for (const char* s : c.yes) EXPECT_TRUE(d.Matches(s)) << c.schema << " should accept " << s;
  for (const char* s : c.no) EXPECT_FALSE(d.Matches(s)) << c.schema << " should reject " << s;
}

TEST(JsonSchema, Objects) {
  Check({R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})",
         {R"({"a":1})", R"({"a":1,"b":"x"})", R"({"a": -5, "b": "x y"})"},
         {R"({"b":"x"})", R"({})", R"({"a":1,"c":2})", R"({"a":1.5})", R"({"b":"x","a":1})", R"({ "a":1})"}});
  Check({R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"},"z":{"type":"number"}}})",
         {R"({})", R"({"x":true})", R"({"y":null,"z":1e5})", R"({"x":false,"y":null,"z":-0.25})"},
         {R"({,"y":null})", R"({"x":true,})", R"({"z":01})"}});
  Check({R"({"type":"object","additionalProperties":false})", {"{}"}, {R"({"a":1})"}});
  Check(
      {R"({"type":"object","additionalProperties":{"type":"integer"}})", {"{}", R"({"k":1,"j":2})"}, {R"({"k":"v"})"}});
  Check({R"({"type":"object","required":["free"]})", {R"({"free":[1,{"a":null}]})"}, {"{}"}});
}

TEST(JsonSchema, ArraysStringsEnumsConst) {
  Check({R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
         {"[1]", "[1,2,3]", "[1, 2]"},
         {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}});
  Check({R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]})",
         {R"(["a",1])"},
         {R"([1,"a"])", "[]"}});
  Check({R"({"type":"string","minLength":2,"maxLength":3})",
         {R"("ab")", R"("a\"c")", R"("\u00e9tx")"},
         {R"("a")", R"("abcd")", R"("\ud800b")", "\"a\nb\""}});
  Check({R"({"enum":["red","green",3,null]})", {R"("red")", "3", "null"}, {R"("blue")", "4"}});
  Check({R"({"const":{"k":[1,true]}})", {R"({"k":[1,true]})"}, {R"({"k":[1]})"}});
  Check({R"({"type":["string","null"]})", {R"("x")", "null"}, {"1"}});
  Check({R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})", {"7", R"("a")"}, {R"("ab")", "true"}});
  Check({R"({"type":"string","pattern":"^[A-Z]{2}\\d$"})", {R"("AB1")"}, {R"("AB12")", R"("ab1")"}});
  Check({R"({"type":"string","pattern":"cat"})", {R"("cat")", R"("a cat!")"}, {R"("dog")"}});
}

TEST(JsonSchema, Formats) {
  Check({R"({"type":"string","format":"date"})",
         {R"("2024-02-28")", R"("1999-12-31")"},
         {R"("2024-02-30")", R"("2024-13-01")", R"("2024-04-31")", R"("24-01-01")"}});
  Check({R"({"type":"string","format":"date-time"})",
         {R"("2024-01-02T03:04:05Z")", R"("2024-01-02T23:59:59.123+05:30")"},
         {R"("2024-01-02 03:04:05Z")", R"("2024-01-02T24:00:00Z")"}});
  Check({R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}});
  Check({R"({"type":"string","format":"email"})", {R"("a.b@example.com")"}, {R"("a@b")", R"("@example.com")"}});
  Check({R"({"type":"string","format":"ipv4"})", {R"("192.168.0.255")"}, {R"("256.1.1.1")", R"("01.1.1.1")"}});
}

TEST(JsonSchema, RefsAndRecursion) {
  Check({R"({"$defs":{"p":{"type":"object","properties":{"n":{"type":"string"}},"required":["n"]}},
            "type":"array","items":{"$ref":"#/$defs/p"}})",
         {R"([{"n":"a"},{"n":"b"}])", "[]"},
         {R"([{"m":"a"}])"}});
  // A tree: recursion is cut at a fixed depth, optional children end there.
  Check(
      {R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"]})",
       {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[]}]})"},
       {R"({"kids":[]})"}});
}

// Integer ranges: every value in [-1200, 1200] is accepted exactly when it
// lies within the bounds; leading zeros and "-0" never are.
TEST(JsonSchema, IntegerRangesExhaustively) {
  const std::pair<std::optional<long long>, std::optional<long long>> bounds[] = {
      {0, 100},           {-50, 50},           {-1000, -7}, {7, 1099}, {std::nullopt, 12}, {-13, std::nullopt},
      {95, std::nullopt}, {std::nullopt, -95}, {0, 0},      {-1, 1},   {10, 10},
  };
  for (auto [lo, hi] : bounds) {
    json s = {{"type", "integer"}};
    if (lo) s["minimum"] = *lo;
    if (hi) s["maximum"] = *hi;
    const Dfa d = CompileSchema(s.dump());
    for (long long v = -1200; v <= 1200; ++v) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      ASSERT_EQ(d.Matches(std::to_string(v)), in) << s.dump() << " value " << v;
    }
    EXPECT_FALSE(d.Matches("-0"));
    EXPECT_FALSE(d.Matches("007"));
  }
  // Exclusive bounds.
  const Dfa x = CompileSchema(R"({"type":"integer","exclusiveMinimum":3,"exclusiveMaximum":6})");
  for (int v = 0; v < 10; ++v) EXPECT_EQ(x.Matches(std::to_string(v)), v == 4 || v == 5) << v;
}

TEST(JsonSchema, NumberRanges) {
  Check({R"({"type":"number","minimum":0,"maximum":1})",
         {"0", "0.5", "1", "1.000", "0.999"},
         {"1.5", "-0.5", "2", "1.01"}});
  Check({R"({"type":"number","minimum":-1,"maximum":0})", {"-1", "-0.5", "0", "-0", "-1.0"}, {"-1.5", "0.5", "-2"}});
  Check({R"({"type":"number","minimum":10})", {"10", "10.5", "123456.7"}, {"9.99", "-10"}});
}

TEST(JsonSchema, AnyJsonObject) {
  auto d = Dfa::Compile(AnyJsonObjectExpr());
  ASSERT_TRUE(d.ok()) << d.status().message();
  for (const char* yes : {"{}", R"({"a":1})", R"({"a":[1,{"b":null}],"c":"x"})", R"({"a": {"b": [true, false]}})"})
    EXPECT_TRUE(d->Matches(yes)) << yes;
  for (const char* no : {"[]", "1", R"({"a":})", R"({a:1})", R"({"a":1,})"}) EXPECT_FALSE(d->Matches(no)) << no;
}

TEST(JsonSchema, DeepNestingIsAnError) {
  json s = {{"type", "integer"}};
  for (int i = 0; i < 70; ++i) s = {{"type", "array"}, {"items", s}};
  auto e = JsonSchemaExpr(s);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("nests deeper"), std::string::npos);
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"object","patternProperties":{}})", "'patternProperties'"},
      {R"({"type":"number","multipleOf":2})", "'multipleOf'"},
      {R"({"not":{}})", "'not'"},
      {R"({"type":"string","format":"uri"})", "'uri'"},
      {R"({"$ref":"http://example.com/s.json"})", "local references"},
      {R"({"$ref":"#/$defs/missing"})", "does not resolve"},
      {R"({"type":"number","minimum":0.5})", "integer value"},
      {R"({"allOf":[{},{}]})", "'allOf'"},
      {R"({"type":"frog"})", "unknown type"},
  };
  for (auto [schema, words] : cases) {
    auto e = JsonSchemaExpr(json::parse(schema));
    ASSERT_FALSE(e.ok()) << schema;
    EXPECT_NE(e.status().message().find(words), std::string::npos) << schema << ": " << e.status().message();
  }
}

}  // namespace
}  // namespace ropeserve::structured
