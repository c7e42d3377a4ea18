// `kiln attention` (see attention_command.h).
#include "tools/attention_command.h"

#include <fmt/format.h>

#include "models/bert.h"
#include "models/gpt.h"
#include "runtime/generation_parts.h"
#include "runtime/output_file.h"
#include "runtime/tokenizer.h"
#include "support/utf8.h"
#include "tools/plot.h"

namespace kiln::tools {

namespace {

// Tokens a picture shows: at 8 px a cell, 128 make panels of 1024 px (cairo's limit is 32767).
constexpr int64_t kMaxTokens = 128;

// A token as an axis label: printable ASCII as it is, a space as a middle dot, other bytes and
// invalid UTF-8 as escapes.
std::string tokenLabel(const std::string &bytes) {
  if (bytes == " ")
    return "\u00b7";
  std::string out;
  const bool utf8 = !firstInvalidUtf8(bytes);
  for (unsigned char c : bytes) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8))
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

} // namespace

CLI::App *addAttentionCommand(CLI::App &app, AttentionArgs &a) {
  CLI::App *c = app.add_subcommand(
      "attention", "Draw a trained model's attention maps on a text (gpt or bert): a heatmap "
                   "per head, the tokens along both axes");
  addSettings(*c, a.sets, "Config override key=value (repeatable): the trained model's");
  addTrainedModel(*c, a.model, a.load, a.tokenizer);
  c->add_option("--text", a.text, "The text (at most seq_len tokens)")
      ->required()
      ->check(nonEmptyText());
  c->add_option("--layer", a.layer, "The layer (0-based; default: the last)")
      ->check(integerIn(0, 1'000'000));
  c->add_option("--head", a.head, "One head (0-based; default: every head)")
      ->check(integerIn(0, 1'000'000));
  c->add_option("-o,--output", a.out, "The picture: .png or .svg")->required()->check(nonEmpty());
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  return c;
}

void runAttention(AttentionArgs &a) {
  refuseInferenceSettings(a.sets, "attention", "one text, no loss");
  const auto checkpoint = adoptDescription(a.load, a.model, a.sets);
  if (a.model != "gpt" && a.model != "bert")
    throw UserError(fmt::format("attention: model {} is not gpt or bert", a.model));
  if (!a.out.ends_with(".png") && !a.out.ends_with(".svg"))
    throw UserError(fmt::format("-o {}: a picture is written as .png or .svg", a.out));
  const runtime::RunInput inputs[] = {{"--load", a.load}, {"--tokenizer", a.tokenizer}};
  orThrow(runtime::checkNotAnInput("-o", a.out, inputs));
  std::vector<models::Setting> settings = inferenceSettings(parseSettings(a.sets), 1);
  ir::Graph forward;
  int64_t padId = 0;
  if (a.model == "gpt") {
    models::GptConfig c = orThrow(models::gptConfig(settings));
    c.probes = true, padId = c.padId;
    forward = orThrow(models::buildGpt(c));
  } else {
    models::BertConfig c = orThrow(models::bertConfig(settings));
    c.probes = true, padId = c.padId;
    forward = orThrow(models::buildBert(c));
  }
  std::vector<std::pair<ir::Graph, std::string_view>> graphs;
  graphs.emplace_back(std::move(forward), "a forward pass");
  std::unique_ptr<runtime::Executable> exe = std::move(compileWithCheckpoint(
      std::move(graphs), a.backend, a.maxMemory, a.load, passes::Precision::F32)[0]);
  const runtime::Tokenizer tokenizer = tokenizerFor(a.tokenizer, checkpoint, a.load);
  // The text from position 0, padded on the right with pad_id (gpt: causal; bert: its padding
  // keys masked).
  const runtime::Symbol *tokens = exe->program().argument("tokens");
  // As generate says it (runtime/generation.cc); else a gather's index error in the library.
  if (tokens->range > 0 && tokenizer.vocabSize() > tokens->range)
    throw UserError(fmt::format("--tokenizer: the tokenizer's {} tokens do not fit the model's "
                                "vocab of {}",
                                tokenizer.vocabSize(), tokens->range));
  // As generate encodes a prompt: the BOS the tokenizer's post-processor puts first (Llama's),
  // then the text's tokens.
  const std::vector<int32_t> ids = runtime::gen::promptTokens(tokenizer, a.text);
  const int64_t length = tokens->shape[1], n = static_cast<int64_t>(ids.size());
  if (n > length)
    throw UserError(
        fmt::format("--text: {} tokens, but the model sees at most {} (seq_len)", n, length));
  if (n > kMaxTokens)
    throw UserError(
        fmt::format("--text: {} tokens, but a picture shows at most {}", n, kMaxTokens));
  runtime::HostTensor in(tokens->dtype, tokens->shape);
  for (int64_t t = 0; t < length; ++t)
    in.setInt(t, t < n ? ids[static_cast<size_t>(t)] : padId);
  orThrow(exe->write(*tokens, in));
  orThrow(exe->run());
  std::vector<const runtime::Symbol *> layers;
  for (const runtime::Symbol &s : exe->program().symbols)
    if (s.kind == runtime::Symbol::Kind::Output && s.name.ends_with(".probs"))
      layers.push_back(&s);
  const auto count = static_cast<int64_t>(layers.size());
  const int64_t layer = a.layer < 0 ? count - 1 : a.layer;
  if (layer >= count)
    throw UserError(
        fmt::format("--layer {}: the model has {} layers (0 to {})", a.layer, count, count - 1));
  const runtime::Symbol &probs = *layers[static_cast<size_t>(layer)];
  const int64_t heads = probs.shape[1];
  if (a.head >= heads)
    throw UserError(
        fmt::format("--head {}: the model has {} heads (0 to {})", a.head, heads, heads - 1));
  const runtime::HostTensor p = exe->read(probs); // [1, H, T, T]
  Heatmaps maps;
  maps.title = fmt::format("{}: attention of layer {} ({})", a.model, layer,
                           probs.name.substr(0, probs.name.size() - 6));
  for (int32_t id : ids)
    maps.tokens.push_back(tokenLabel(orThrow(tokenizer.decode(std::span<const int32_t>(&id, 1)))));
  for (int64_t h = a.head < 0 ? 0 : a.head; h < (a.head < 0 ? heads : a.head + 1); ++h) {
    maps.panelTitles.push_back(fmt::format("head {}", h));
    std::vector<double> panel;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        panel.push_back(p.get((h * length + i) * length + j));
    maps.panels.push_back(std::move(panel));
  }
  orThrow(drawHeatmaps(maps, a.out));
  fmt::print("drew the attention of layer {} ({} head{}, {} tokens) to {}\n", layer,
             maps.panels.size(), maps.panels.size() == 1 ? "" : "s", n, a.out);
}

} // namespace kiln::tools
