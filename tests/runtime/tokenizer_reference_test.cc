// kiln's tokenizers against Hugging Face tokenizers on real vocabularies (GPT-2's, Llama 2's,
// Llama 3's): tests/tokenizers/run.sh writes the reference's ids and texts (reference.js) for its
// corpus and lists them in $KILN_TOKENIZER_REFERENCE/cases.tsv, then runs this; without that
// variable (the plain gtest run, which has no node or npm files) it skips. Each case: every text's
// ids, the decode of the reference's ids, the template's BOS; and the file toJson() writes reads
// back to the same ids (run.sh gives that file, NAME.kiln.json, to the reference too).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/json_text.h"
#include "runtime/tokenizer.h"

namespace kiln::tokenizer_reference_test {
namespace {

using runtime::Json;
using runtime::Tokenizer;

std::string readText(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string idList(const std::vector<int32_t> &ids) {
  std::string out;
  for (int32_t id : ids)
    out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

// Compares every text of one case; returns how many differ.
int compareTexts(const Tokenizer &t, const Json &expected, const std::string &name) {
  int differ = 0;
  for (const Json &e : expected["texts"]) {
    const std::string text = e["text"].get<std::string>();
    const std::vector<int32_t> want = e["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = t.encode(text);
    Expected<std::string> decoded = t.decode(want);
    const bool same = got == want && decoded && *decoded == e["decoded"].get<std::string>();
    differ += !same;
    EXPECT_EQ(idList(got), idList(want)) << name << ": " << runtime::jsonQuote(text);
    if (!decoded) {
      ADD_FAILURE() << name << ": " << decoded.error().message;
      continue;
    }
    EXPECT_EQ(*decoded, e["decoded"].get<std::string>()) << name << ": " << idList(want);
  }
  return differ;
}

TEST(TokenizerReference, HuggingFaceIdsAndTexts) {
  const char *dir = std::getenv("KILN_TOKENIZER_REFERENCE");
  if (!dir)
    GTEST_SKIP() << "run by tests/tokenizers/run.sh (KILN_TOKENIZER_REFERENCE names its files)";
  std::istringstream cases(readText(std::filesystem::path(dir) / "cases.tsv"));
  int count = 0;
  for (std::string line; std::getline(cases, line);) {
    std::istringstream fields(line);
    std::string name, tokenizerPath, expectedPath;
    std::getline(fields, name, '\t'), std::getline(fields, tokenizerPath, '\t');
    std::getline(fields, expectedPath);
    SCOPED_TRACE(name);
    Expected<Tokenizer> t = Tokenizer::load(tokenizerPath);
    ASSERT_TRUE(t.ok()) << t.error().message;
    const Json expected = Json::parse(readText(expectedPath));
    ASSERT_GE(expected["texts"].size(), 50u);
    const int differ = compareTexts(*t, expected, name);
    std::printf("%s: %zu texts, %d differ\n", name.c_str(), expected["texts"].size(), differ);
    EXPECT_EQ(t->bosId(), expected["bos"].is_null()
                              ? std::nullopt
                              : std::optional<int32_t>(expected["bos"].get<int32_t>()));
    // The file kiln writes: the same tokenizer in kiln (and, run.sh checks, in Hugging Face's).
    const std::string written = t->toJson();
    std::ofstream(std::filesystem::path(dir) / (name + ".kiln.json"), std::ios::binary) << written;
    Expected<Tokenizer> back = Tokenizer::parse(written, name + ".kiln.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->toJson(), written);
    EXPECT_EQ(back->bosId(), t->bosId());
    EXPECT_EQ(compareTexts(*back, expected, name + " (written)"), differ);
    ++count;
  }
  EXPECT_GE(count, 8) << "cases.tsv lists fewer tokenizers than run.sh writes";
}

} // namespace
} // namespace kiln::tokenizer_reference_test
