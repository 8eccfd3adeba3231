#include "server/common/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace ropeserve {
namespace {

using nlohmann::json;

json Parse(const char* text) { return json::parse(text); }

TEST(JsonReader, AbsentAndNullAreNotGiven) {
  json j = Parse(R"({"a": null})");
  JsonReader r(j, "cfg.json");
  std::optional<std::int64_t> a = 7;
  ASSERT_TRUE(r.Read("a", a).ok());
  EXPECT_EQ(a, 7);  // left alone
  EXPECT_FALSE(r.Has("a"));
  EXPECT_FALSE(r.Has("b"));
  EXPECT_EQ(r.Int("b", 3).value(), 3);
  EXPECT_EQ(r.String("a", std::string("d")).value(), "d");
  Status missing = r.Int("b").status();
  EXPECT_EQ(missing.message(), "cfg.json: missing required key 'b'");
}

TEST(JsonReader, Integers) {
  json j = Parse(
      R"({"i": -5, "f": 2048.0, "frac": 2.5, "big": 18446744073709551615, "huge": 1e30, "s": "1", "b": true,
          "i64max": 9223372036854775807, "past": 9223372036854775808})");
  JsonReader r(j, "w");
  EXPECT_EQ(r.Int("i").value(), -5);
  EXPECT_EQ(r.Int("f").value(), 2048);  // exporters write 2048.0
  EXPECT_EQ(r.Int("i64max").value(), INT64_MAX);
  for (const char* bad : {"frac", "big", "huge", "s", "b", "past"}) {
    Status s = r.Int(bad).status();
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find(std::string("'") + bad + "' must be an integer, got "), std::string::npos)
        << s.message();
  }
  // Narrower types: the value must fit.
  std::optional<std::int32_t> narrow;
  EXPECT_FALSE(r.Read("i64max", narrow).ok());
  ASSERT_TRUE(r.Read("i", narrow).ok());
  EXPECT_EQ(narrow, -5);
}

TEST(JsonReader, SeedsTakeAnyIntegerModulo2To64) {
  json j = Parse(R"({"max": 18446744073709551615, "neg": -1, "f": 3.0, "frac": 0.5})");
  JsonReader r(j, "");
  std::optional<std::uint64_t> v;
  ASSERT_TRUE(r.Read("max", v).ok());
  EXPECT_EQ(v, UINT64_MAX);
  ASSERT_TRUE(r.Read("neg", v).ok());
  EXPECT_EQ(v, UINT64_MAX);
  ASSERT_TRUE(r.Read("f", v).ok());
  EXPECT_EQ(v, 3u);
  EXPECT_FALSE(r.Read("frac", v).ok());
}

TEST(JsonReader, NumbersBoolsStrings) {
  json j = Parse(R"({"d": 0.25, "i": 3, "s": "x", "b": false, "n": "0.5"})");
  JsonReader r(j, "w");
  EXPECT_EQ(r.Double("d").value(), 0.25);
  EXPECT_EQ(r.Double("i").value(), 3.0);
  EXPECT_EQ(r.Bool("b", true).value(), false);
  EXPECT_EQ(r.String("s").value(), "x");
  EXPECT_EQ(r.Double("n").status().message(), R"(w: 'n' must be a finite number, got "0.5")");
  EXPECT_EQ(r.Bool("s", false).status().message(), R"(w: 's' must be true or false, got "x")");
  EXPECT_EQ(r.String("b").status().message(), "w: 'b' must be a string, got false");
  // A double past the range nlohmann keeps as infinity.
  json inf = json::object({{"x", std::numeric_limits<double>::infinity()}});
  EXPECT_FALSE(JsonReader(inf, "w").Double("x").ok());
}

TEST(JsonReader, ArraysAndIntLists) {
  json j = Parse(R"({"a": [1, 2], "one": 5, "o": {}, "mixed": [1, "2"]})");
  JsonReader r(j, "w");
  EXPECT_EQ(r.Array("a").value()->size(), 2u);
  EXPECT_EQ(r.Array("o").status().message(), "w: 'o' must be an array, got {}");
  EXPECT_EQ(r.Array("none").status().message(), "w: missing required key 'none'");
  EXPECT_EQ(r.IntOrList("a").value(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(r.IntOrList("one").value(), (std::vector<std::int64_t>{5}));
  EXPECT_TRUE(r.IntOrList("none").value().empty());
  EXPECT_FALSE(r.IntOrList("mixed").ok());
}

TEST(JsonReader, ErrorMakerAndShownValue) {
  // A request body's errors name the field (the maker gets where and key).
  auto maker = [](const std::string& where, const std::string& key, const std::string& message) {
    return InvalidArgument("[" + where + "|" + key + "] " + message);
  };
  nlohmann::ordered_json j = nlohmann::ordered_json::object({{"k", std::string(300, 'x')}});
  JsonReader r(j, "parameters", maker);
  Status s = r.Int("k").status();
  const std::string prefix = "[parameters|k] 'k' must be an integer, got ";
  ASSERT_EQ(s.message().substr(0, prefix.size()), prefix);
  EXPECT_EQ(s.message().size(), prefix.size() + 100);  // the value is cut at 100 bytes
  // Invalid UTF-8 inside a value is replaced, never thrown.
  nlohmann::ordered_json bad = nlohmann::ordered_json::object({{"k", std::string("\xff\xfe")}});
  EXPECT_FALSE(JsonReader(bad, "w").Bool("k", false).ok());
  // Not an object: every key reads as not given.
  json arr = Parse("[1]");
  EXPECT_EQ(JsonReader(arr, "w").Int("k", 1).value(), 1);
}

}  // namespace
}  // namespace ropeserve
