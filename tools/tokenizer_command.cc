// `kiln tokenizer` (see tokenizer_command.h).
#include "tools/tokenizer_command.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/output_file.h"
#include "runtime/tokenizer.h"
#include "support/utf8.h"
#include "tools/cli_util.h"

namespace kiln::tools {

namespace {

runtime::Tokenizer loadFrom(const TokenizerArgs &a) {
  if (!a.tokenizer.empty())
    return orThrow(runtime::Tokenizer::load(a.tokenizer));
  if (a.vocab.empty() || a.merges.empty())
    throw UserError("give --tokenizer tokenizer.json, or --vocab vocab.json with --merges "
                    "merges.txt");
  return orThrow(runtime::Tokenizer::loadVocabMerges(a.vocab, a.merges));
}

void addSource(CLI::App &c, TokenizerArgs &a) {
  CLI::Option *tok =
      c.add_option("--tokenizer", a.tokenizer,
                   "A tokenizer.json (byte-level BPE, as GPT-2's, Llama 3's and Qwen2's, or "
                   "SentencePiece-style BPE with byte fallback, as Llama 2's and Mistral's)")
          ->check(nonEmpty());
  c.add_option("--vocab", a.vocab, "GPT-2's vocab.json (with --merges)")
      ->check(nonEmpty())
      ->excludes(tok);
  c.add_option("--merges", a.merges, "GPT-2's merges.txt (with --vocab)")
      ->check(nonEmpty())
      ->excludes(tok);
}

} // namespace

CLI::App *addTokenizerCommand(CLI::App &app, TokenizerArgs &a) {
  CLI::App *c = app.add_subcommand("tokenizer", "Learn a byte-level BPE tokenizer from a text "
                                                "file, or encode and decode with one");
  c->require_subcommand(1);
  a.train = c->add_subcommand("train", "Learn merges from a text file (GPT-2's pre-split, the "
                                       "most frequent pair first, ties by lowest ids)");
  a.train->add_option("file", a.file, "The text file ('-' = stdin)")->required();
  a.train
      ->add_option("--vocab-size", a.vocabSize,
                   "Tokens to learn up to: the 256 bytes and the merges (fewer if no pair of "
                   "tokens occurs twice)")
      ->check(integerIn(256, 1'000'000));
  a.train->add_option("-o,--output", a.out, "The tokenizer.json to write ('-' = stdout)");
  a.train
      ->add_option("--special", a.specials,
                   "A special token (repeatable, e.g. \"<|endoftext|>\"): one id wherever its "
                   "text occurs, never merged; counted in --vocab-size")
      ->check(nonEmptyText());
  a.encode = c->add_subcommand("encode", "Print the ids of a text's tokens");
  a.encode->add_option("text", a.text, "The text")->required();
  a.encode->add_flag("--bos", a.bos,
                     "Put the tokenizer's BOS first, if its post-processor has one (Llama's "
                     "<s>), as kiln generate does with a prompt");
  addSource(*a.encode, a);
  a.decode = c->add_subcommand("decode", "Print the text of a list of ids");
  a.decode->add_option("ids", a.ids, "The ids")
      ->required()
      ->check(integerIn(0, std::numeric_limits<int32_t>::max()));
  addSource(*a.decode, a);
  return c;
}

void runTokenizer(TokenizerArgs &a) {
  if (*a.train) {
    if (a.out != "-") { // before the training, which a bad path must not cost
      const runtime::RunInput inputs[] = {{"the text it trains on", a.file}};
      orThrow(runtime::checkNotAnInput("-o", a.out, inputs));
      orThrow(runtime::checkOutputFile(a.out));
    }
    const std::string text = readInputFile(a.file);
    if (text.empty())
      throw UserError(
          fmt::format("{}: the text is empty: there are no pairs to learn merges from", a.file));
    for (size_t i = 0; i < a.specials.size(); ++i) {
      const std::string &special = a.specials[i];
      if (!isValidUtf8(special))
        throw UserError(fmt::format("--special: \"{}\" is not valid UTF-8", special));
      if (std::find(a.specials.begin(), a.specials.begin() + static_cast<ptrdiff_t>(i), special) !=
          a.specials.begin() + static_cast<ptrdiff_t>(i))
        throw UserError(
            fmt::format("--special \"{}\" is given twice (a token has one id)", special));
    }
    if (static_cast<int64_t>(a.specials.size()) > a.vocabSize - 256)
      throw UserError(fmt::format("--special: {} special tokens do not fit in --vocab-size {} "
                                  "beside the 256 bytes",
                                  a.specials.size(), a.vocabSize));
    Expected<runtime::Tokenizer> trained = runtime::Tokenizer::train(text, a.vocabSize, a.specials);
    if (!trained)
      throw UserError("--special: " + trained.error().message);
    const runtime::Tokenizer &t = *trained;
    orThrow(writeOutput(a.out, t.toJson()));
    const size_t tokens = t.encode(text).size();
    fmt::print(a.out == "-" ? stderr : stdout,
               "{} tokens ({} merges{}); {}: {} bytes as {} tokens ({:.2f} bytes per token){}\n",
               t.vocabSize(), t.mergeCount(),
               t.specials().empty() ? "" : fmt::format(", {} special", t.specials().size()), a.file,
               text.size(), tokens,
               tokens ? static_cast<double>(text.size()) / static_cast<double>(tokens) : 0.0,
               a.out == "-" ? "" : "; wrote " + a.out);
    return;
  }
  const runtime::Tokenizer t = loadFrom(a);
  if (*a.encode) {
    std::vector<int32_t> ids = t.encode(a.text);
    if (a.bos && t.bosId())
      ids.insert(ids.begin(), *t.bosId());
    fmt::print("{}\n", fmt::join(ids, " "));
    return;
  }
  std::vector<int32_t> ids;
  for (int64_t id : a.ids) {
    if (id < 0 || id >= t.vocabSize())
      throw UserError(
          fmt::format("id {}: not in the tokenizer's vocabulary of {}", id, t.vocabSize()));
    ids.push_back(static_cast<int32_t>(id));
  }
  fmt::print("{}\n", orThrow(t.decode(ids)));
}

} // namespace kiln::tools
