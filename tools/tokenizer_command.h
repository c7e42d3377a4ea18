// `kiln tokenizer train FILE --vocab-size N -o tok.json` learns a byte-level BPE tokenizer from a
// text file (runtime/tokenizer.h) and writes it as a Hugging Face tokenizer.json;
// `kiln tokenizer encode|decode` show what a tokenizer (kiln's or Hugging Face's tokenizer.json,
// or GPT-2's vocab.json with merges.txt) makes of a text or a list of ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kiln::tools {

struct TokenizerArgs {
  std::string file, out = "-";
  int64_t vocabSize = 512;
  std::vector<std::string> specials;    // train: --special
  std::string tokenizer, vocab, merges; // encode, decode: --tokenizer, or --vocab with --merges
  std::string text;                     // encode: the text
  bool bos = false;                     // encode: the tokenizer's BOS first
  std::vector<int64_t> ids;             // decode: the ids
  CLI::App *train = nullptr, *encode = nullptr, *decode = nullptr;
};

CLI::App *addTokenizerCommand(CLI::App &app, TokenizerArgs &args);
void runTokenizer(TokenizerArgs &args);

} // namespace kiln::tools
