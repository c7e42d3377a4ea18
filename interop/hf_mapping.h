// Inside the Hugging Face import/export: how one architecture corresponds to kiln's gpt. Each
// architecture states its config keys' meaning (config.json -> gpt settings, and back) and one
// table of tensor correspondences that both directions read, so the two cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/gpt.h"
#include "runtime/json_text.h"
#include "support/status.h"

namespace kiln::interop {

// One kiln tensor's place in a Hugging Face tensor. kiln's tensor is the rows [offset, offset +
// kilnShape[0]) of the HF tensor's `rows` along its output axis (rows 0: kilnShape[0], the whole
// tensor): fused projections keep several kiln tensors one after another there (GPT-2's c_attn:
// q, k, v; Phi-3's qkv_proj, of GQA's smaller k and v, and gate_up_proj). With `transposed`, the
// HF tensor is stored [in, out] (GPT-2's Conv1D), so its output axis is its last, where kiln's
// Linear keeps [out, in]. kiln's values are the HF ones + `plus` (Gemma's RMSNorm scales by 1 +
// its weight, kiln's by its weight: plus 1), in f32.
struct TensorRule {
  std::string kiln, hf;
  std::vector<int64_t> kilnShape;
  bool transposed = false;
  int64_t offset = 0, rows = 0;
  float plus = 0;

  // The HF tensor's shape: kiln's with `rows` for its first axis, reversed if transposed.
  std::vector<int64_t> hfShape() const;
  // Where element [o, i] of kiln's tensor (o < kilnShape[0], i counting the rest row-major) is
  // in the HF tensor's row-major data.
  int64_t hfIndex(int64_t o, int64_t i) const;
};

// A config.json read into gpt settings ("key", "value" text), with the architecture's name.
struct ImportedConfig {
  std::vector<models::Setting> settings;
  // What the config holds that kiln passes over or that transformers warns of, one line each,
  // naming the file and key (import prints them as notes).
  std::vector<std::string> notes;
};

struct Architecture {
  std::string_view name;      // "GPT2LMHeadModel"
  std::string_view modelType; // config.json's "model_type": "gpt2"
  // Where the model body's tensors live ("transformer.", "model."); a checkpoint of the bare
  // body (GPT2Model, LlamaModel) names them without it, and import takes either.
  std::string_view bodyPrefix;
  // config.json -> gpt settings; Errors name the key ("config.json: n_embd: ...").
  Expected<ImportedConfig> (*readConfig)(const runtime::Json &config);
  // Whether a gpt config is this architecture's; else the first setting that differs, as
  // "norm_kind=rmsnorm (GPT-2 has layernorm)".
  Status (*fits)(const models::GptConfig &c);
  runtime::Json (*writeConfig)(const models::GptConfig &c);
  std::vector<TensorRule> (*rules)(const models::GptConfig &c);
  // Buffers a checkpoint may hold that are no weights (GPT-2's attn.bias mask, LLaMA's
  // rotary_emb.inv_freq): names ending in one of these are passed over.
  std::vector<std::string_view> ignoredSuffixes;
};

const Architecture &gpt2Architecture();
const Architecture &llamaArchitecture();
const Architecture &qwen2Architecture(); // LLaMA's reader and rules, with Qwen2's q, k, v biases
const Architecture &phi3Architecture();  // LLaMA's reader, its projections fused
const Architecture &gemmaArchitecture(); // LLaMA's reader and rules, GeGLU, norms of 1 + weight

// ---- Reading config.json values; errors read "config.json: KEY: expected ..., got VALUE" ----
struct ConfigReader {
  const runtime::Json &config;
  std::string_view where = ""; // an object inside config.json: "rope_scaling." (errors say it)
  Expected<int64_t> integer(std::string_view key) const;                   // required, >= 1
  Expected<int64_t> integer(std::string_view key, int64_t fallback) const; // absent or null
  Expected<double> number(std::string_view key, double fallback) const;    // > 0, finite
  // required: a list of numbers > 0, finite, not empty (`expected` says what the list is)
  Expected<std::vector<double>> numbers(std::string_view key, std::string_view expected) const;
  Expected<bool> boolean(std::string_view key, bool fallback) const;
  Expected<std::string> text(std::string_view key, std::string fallback) const;
  bool present(std::string_view key) const; // there and not null
  Error error(std::string_view key, std::string_view expected) const;
};

// "key=value" settings, with a number written the shortest way that reads back exactly.
models::Setting setting(std::string key, int64_t value);
models::Setting setting(std::string key, double value);
models::Setting setting(std::string key, std::string value);

// The sequence length an import gives its graphs: the model's context, at most kImportSeqLen
// (a longer window costs its square in every prefill; --set seq_len=N takes more).
inline constexpr int64_t kImportSeqLen = 1024;

} // namespace kiln::interop
