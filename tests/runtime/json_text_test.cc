// The one JSON reader of outside files: nesting bounded (not a stack overflow), duplicate keys
// named with their place, the top level's file order kept, errors at their byte.
#include "runtime/json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::runtime::json_text_test {
namespace {

std::string errorOf(std::string_view text, const JsonReadOptions &o = {}) {
  Expected<JsonText> j = readJson(text, o);
  return j ? "parsed" : j.error().message;
}

// 200k open brackets (a 400 KB file) overflowed the stack in nlohmann's copy and destructor; now
// the parse stops at level 129 and names its byte.
TEST(JsonText, DeepNestingIsAnErrorAtItsByte) {
  EXPECT_EQ(errorOf(std::string(200'000, '[')), "byte 128: JSON nests deeper than 128 levels");
  EXPECT_EQ(errorOf("{\"a\": " + std::string(200'000, '['), {.base = 8, .what = "header"}),
            "byte 141: header nests deeper than 128 levels");
  // 128 levels are fine.
  EXPECT_EQ(errorOf(std::string(128, '[') + std::string(128, ']')), "parsed");
  // Brackets inside strings are text.
  EXPECT_EQ(errorOf("[\"" + std::string(300, '[') + "\"]"), "parsed");
}

TEST(JsonText, DuplicateKeysAreNamedWithTheirPlace) {
  EXPECT_EQ(errorOf(R"({"a": 1, "a": 2})"), "key \"a\" appears twice at the top level");
  EXPECT_EQ(errorOf(R"({"model": {"vocab": {"x": 0, "y": 1, "x": 2}}})", {.what = "tok"}),
            "tok: key \"x\" appears twice in model.vocab");
  EXPECT_EQ(errorOf(R"({"added": [{"id": 1}, [2, {"c": 1, "c": 2}]]})"),
            "key \"c\" appears twice in added[1][1]");
  // The same key in different objects is not a duplicate.
  EXPECT_EQ(errorOf(R"([{"a": 1}, {"a": 2}])"), "parsed");
  JsonReadOptions own{.duplicate = [](const std::vector<std::string> &path, const std::string &k) {
    return makeError("{} then {}", path.empty() ? "-" : path[0], k);
  }};
  EXPECT_EQ(errorOf(R"({"t": {"d": 1, "d": 1}})", own), "t then d");
}

TEST(JsonText, TopLevelKeysKeepTheirFileOrder) {
  Expected<JsonText> j = readJson(R"({"z": 1, "a": {"q": 2, "b": 3}, "m": [4]})", {});
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(j->topKeys, (std::vector<std::string>{"z", "a", "m"}));
  EXPECT_EQ(j->value.at("a").at("b"), 3);
}

TEST(JsonText, SyntaxErrorsNameTheirByte) {
  EXPECT_EQ(errorOf("{\"a\" 1}", {.base = 8, .what = "header"}),
            "byte 13: header is not valid JSON: syntax error while parsing object separator - "
            "unexpected number literal; expected ':'");
  EXPECT_EQ(errorOf("[1, 1e400]"), "byte 4: not valid JSON: number overflow parsing '1e400'");
}

// A 100k-key object loads in linear-ish time (ordered_json took 11.9 s: each insert scanned the
// object). No clock here: the count of keys and their lookups are what is checked; the timing
// is in bench/ and the issue note.
TEST(JsonText, LargeObjectsLoadWhole) {
  std::string text = "{";
  for (int k = 0; k < 100'000; ++k)
    text += (k ? ",\"" : "\"") + std::to_string(k) + "\":" + std::to_string(k);
  text += "}";
  Expected<JsonText> j = readJson(text, {});
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(j->value.size(), 100'000u);
  EXPECT_EQ(j->topKeys.size(), 100'000u);
  EXPECT_EQ(j->topKeys[99'999], "99999");
  EXPECT_EQ(j->value.at("77777"), 77777);
}

} // namespace
} // namespace kiln::runtime::json_text_test
