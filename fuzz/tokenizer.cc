// Fuzz target: tokenizer files (kiln train/generate --tokenizer, kiln tokenizer) and the text a
// tokenizer encodes. The input as text: each pre-split pattern covers it exactly, in order, a BPE
// tokenizer (trained once on a fixed text) encodes and decodes it to itself, and its NFC is its
// own NFC. The input as a tokenizer.json: it parses or is an error, never a crash; a tokenizer it
// gives encodes a fixed text to ids that decode (a byte-level one to the text itself) and writes a
// file that parses back to the same file.
#include <string>

#include "fuzz/fuzz.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode_nfc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using kiln::runtime::Tokenizer;
  const std::string_view in = kiln::fuzz::text(data, size);
  for (const Tokenizer::PreSplit split : {Tokenizer::PreSplit::Gpt2, Tokenizer::PreSplit::Llama3,
                                          Tokenizer::PreSplit::Qwen2, Tokenizer::PreSplit::O200k}) {
    std::string joined;
    for (std::string_view w : Tokenizer::words(in, split)) {
      if (w.empty())
        kiln::fuzz::fail("a pre-split gave an empty word", std::string(in));
      joined += w;
    }
    if (joined != in)
      kiln::fuzz::fail("the words do not join back into the text", std::string(in));
  }
  // NFC (Qwen2's normalizer) of any bytes is its own NFC.
  const std::string nfc = kiln::runtime::toNfc(in);
  if (kiln::runtime::toNfc(nfc) != nfc)
    kiln::fuzz::fail("NFC of a text in NFC is another text", std::string(in));
  static const Tokenizer trained =
      Tokenizer::train("the cat's hat sat on the mat; caf\xC3\xA9 na\xC3\xAFve\n\n  x 42", 300)
          .value();
  kiln::Expected<std::string> back = trained.decode(trained.encode(in));
  if (!back || *back != in)
    kiln::fuzz::fail("encode then decode does not give the text back", std::string(in));

  kiln::Expected<Tokenizer> t = Tokenizer::parse(in, "input");
  if (!t)
    return 0;
  const std::string sample("Hello, world! \xFF\x00 the end\n", 25); // the NUL included
  kiln::Expected<std::string> round = t->decode(t->encode(sample));
  // A byte-level tokenizer gives any bytes back; a SentencePiece one decodes as Hugging Face's
  // does (invalid UTF-8 as U+FFFD, the leading space stripped), so its ids need only decode.
  const bool byteLevel = t->kind() == Tokenizer::Kind::ByteLevel;
  if (!round || (byteLevel && *round != sample))
    kiln::fuzz::fail("a parsed tokenizer does not round-trip a text", std::string(in));
  const std::string json = t->toJson();
  kiln::Expected<Tokenizer> again = Tokenizer::parse(json, "written");
  if (!again || again->toJson() != json)
    kiln::fuzz::fail("a written tokenizer.json does not parse back to itself", std::string(in));
  return 0;
}
