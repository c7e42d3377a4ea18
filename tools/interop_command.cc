// `kiln import` and `kiln export` (see interop_command.h).
#include "tools/interop_command.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interop/huggingface.h"
#include "runtime/output_file.h"
#include "tools/cli_util.h"

namespace kiln::tools {

namespace fs = std::filesystem;

void addInteropCommands(CLI::App &app, InteropArgs &a) {
  a.importCmd = app.add_subcommand(
      "import", "Read a Hugging Face model directory (GPT-2, Llama, Mistral, Qwen2, Phi-3: "
                "config.json, model.safetensors, tokenizer.json) into one self-describing kiln "
                "checkpoint");
  a.importCmd->add_option("dir", a.from, "The Hugging Face model directory")
      ->required()
      ->check(nonEmpty());
  a.importCmd->add_option("-o,--output", a.out, "The kiln checkpoint to write (.safetensors)")
      ->required()
      ->check(nonEmpty());
  a.exportCmd = app.add_subcommand(
      "export", "Write a kiln gpt checkpoint as a Hugging Face model directory (GPT-2's, "
                "LLaMA's, Mistral's, Qwen2's or Phi-3's layout, with config.json and "
                "tokenizer.json)");
  a.exportCmd->add_option("checkpoint", a.from, "The kiln checkpoint (kiln train --save, import)")
      ->required()
      ->check(nonEmpty());
  a.exportCmd->add_option("-o,--output", a.out, "The directory to write")
      ->required()
      ->check(nonEmpty());
  a.exportCmd
      ->add_option("--architecture", a.architecture,
                   "The Hugging Face class whose layout to write; default: the one the checkpoint "
                   "was imported from where the model fits it, else the first that fits")
      ->check(CLI::IsMember(interop::exportedArchitectures()));
}

namespace {

// Refuses an -o in the model directory `from` that is one of its files (the weights, a shard,
// the index, the tokenizer's) or a name import reads there: it would destroy the model, or,
// written, change what the directory holds (a model.safetensors beside shards).
void checkNotInModel(const std::string &out, const std::string &from) {
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(from, ec)) {
    const std::string what =
        fmt::format("{} of the model directory {}", e.path().filename().string(), from);
    const runtime::RunInput file[] = {{what, e.path().string()}};
    orThrow(runtime::checkNotAnInput("-o", out, file));
  }
  const fs::path parent = fs::absolute(fs::path(out), ec).parent_path();
  if (!fs::equivalent(parent, from, ec) || ec)
    return;
  const std::string name = fs::path(out).filename().string();
  for (const char *read : {"model.safetensors", "model.safetensors.index.json", "config.json",
                           "tokenizer.json", "vocab.json", "merges.txt"})
    if (name == read)
      throw UserError(fmt::format("-o {}: is the {} import reads in {}: writing it would change "
                                  "the model directory; write the checkpoint elsewhere",
                                  out, name, from));
}

void runImport(const InteropArgs &a) {
  checkNotInModel(a.out, a.from);
  orThrow(runtime::checkOutputFile(a.out));
  interop::DescribedWeights w = orThrow(interop::importHuggingFace(a.from));
  orThrow(runtime::writeSafetensors(a.out, w.weights));
  std::string settings;
  for (const auto &[key, value] : w.description.settings)
    settings += fmt::format(" {}={}", key, value);
  int64_t params = 0;
  for (const runtime::SafetensorsTensor &t : w.weights.tensors)
    params += static_cast<int64_t>(t.data.size() / 4);
  fmt::print("{}: {} as gpt ({} parameters){}\n", a.out, w.architecture,
             params < 1'000'000 ? fmt::format("{}", params) : fmt::format("{:.1f}M", params / 1e6),
             w.description.tokenizerJson.empty()
                 ? ", no tokenizer.json (or vocab.json with merges.txt): ids are not text"
                 : "");
  fmt::print("  settings:{}\n", settings);
  for (const std::string &note : w.notes)
    fmt::print(stderr, "kiln: note: {}\n", note);
  if (const std::vector<int32_t> &ends = w.description.endTokens; !ends.empty()) {
    const bool past =
        std::any_of(ends.begin(), ends.end(), [&](int32_t id) { return id >= w.drawnIds; });
    fmt::print(
        "  generation ends at {} {}{} ({}'s eos_token_id){}\n", ends.size() == 1 ? "id" : "ids",
        fmt::join(ends.begin(), ends.begin() + std::min<ptrdiff_t>(std::ssize(ends), 8), " "),
        ends.size() > 8 ? fmt::format(" ... ({} ids)", ends.size()) : "", w.endTokensFrom,
        past ? fmt::format("; ids from {} are past the {}: none is ever generated", w.drawnIds,
                           w.description.tokenizerJson.empty() ? "vocabulary" : "tokenizer's ids")
             : "");
  }
}

void runExport(const InteropArgs &a) {
  runtime::SafetensorsFile ckpt = orThrow(runtime::readSafetensors(a.from));
  std::optional<runtime::ModelDescription> d = orThrow(runtime::describedBy(ckpt.metadata, a.from));
  if (!d)
    throw UserError(fmt::format("{}: the checkpoint does not say what model it is (no "
                                "\"kiln.model\" metadata: written for an IR file, by parity-dump "
                                "or by an older kiln), so it has no Hugging Face form",
                                a.from));
  Expected<interop::HuggingFaceFiles> exported =
      interop::exportHuggingFace(*d, ckpt, a.architecture);
  if (!exported)
    throw UserError(fmt::format("{}: {}", a.from, exported.error().message));
  interop::HuggingFaceFiles &files = *exported;
  std::error_code ec;
  if (fs::exists(a.out, ec) && !fs::is_directory(a.out, ec))
    throw UserError(fmt::format("-o {}: exists and is not a directory", a.out));
  const fs::path dir(a.out);
  const runtime::RunInput inputs[] = {{"the checkpoint it exports", a.from}};
  for (const char *name : {"model.safetensors", "config.json", "tokenizer.json"})
    orThrow(runtime::checkNotAnInput("-o", (dir / name).string(), inputs));
  // A checkpoint of byte tokens writes no tokenizer.json: one left in DIR by an earlier export,
  // or GPT-2's vocab.json and merges.txt, would go with this model (import reads them) and turn
  // its ids into another text.
  if (files.tokenizerJson.empty())
    for (const char *name : {"tokenizer.json", "vocab.json", "merges.txt"})
      if (fs::exists(dir / name, ec))
        throw UserError(fmt::format(
            "-o {}: holds a {}, but {} has no tokenizer (its ids are bytes): the file would "
            "describe this model's ids wrongly; remove it or export to another directory",
            a.out, name, a.from));
  // Files that kiln does not write and transformers reads beside the model (its decoding
  // defaults and special ids, its tokenizer's class and tokens; the slow tokenizer's vocab.json
  // and merges.txt), or other loaders read instead of model.safetensors (a shard index and its
  // shards, PyTorch's pickles): left from another model, they would go with this one.
  auto leftBehind = [](const std::string &name) {
    for (const char *known :
         {"generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
          "added_tokens.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
          "pytorch_model.bin", "pytorch_model.bin.index.json"})
      if (name == known)
        return true;
    // Shards: model-00001-of-00003.safetensors, pytorch_model-00001-of-00003.bin.
    return (name.starts_with("model-") && name.ends_with(".safetensors")) ||
           (name.starts_with("pytorch_model-") && name.ends_with(".bin"));
  };
  std::vector<std::string> left;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (leftBehind(it->path().filename().string()))
      left.push_back(it->path().filename().string());
  std::sort(left.begin(), left.end());
  if (!left.empty())
    throw UserError(fmt::format(
        "-o {}: holds {}, which kiln does not write and transformers or other loaders read with "
        "the model: left from another model, {} would describe this one wrongly; remove {} or "
        "export to another directory",
        a.out, fmt::join(left, ", "), left.size() == 1 ? "it" : "they",
        left.size() == 1 ? "it" : "them"));
  MadeDirs made(dir);
  fs::create_directories(dir, ec);
  if (ec)
    throw UserError(fmt::format("-o {}: cannot create the directory: {}", a.out, ec.message()));
  runtime::StagedOutputs staged;
  const std::vector<uint8_t> model = runtime::serializeSafetensors(files.model);
  const std::span<const uint8_t> pieces[] = {model};
  orThrow(staged.stage((dir / "model.safetensors").string(), pieces));
  orThrow(staged.stage((dir / "config.json").string(), files.configJson));
  if (!files.tokenizerJson.empty())
    orThrow(staged.stage((dir / "tokenizer.json").string(), files.tokenizerJson));
  orThrow(staged.commit());
  made.keep = true;
  fmt::print("{}: {} ({} tensors{})\n", a.out, files.architecture, files.model.tensors.size(),
             files.tokenizerJson.empty() ? ", no tokenizer: the checkpoint has none" : "");
}

} // namespace

bool runInterop(InteropArgs &a) {
  if (*a.importCmd)
    runImport(a);
  else if (*a.exportCmd)
    runExport(a);
  else
    return false;
  return true;
}

} // namespace kiln::tools
