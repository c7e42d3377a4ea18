// Hugging Face checkpoints in and out of kiln: a directory holding config.json, model.safetensors
// (or shards listed by model.safetensors.index.json) and tokenizer.json -- what transformers'
// save_pretrained writes and what llama.cpp, PyTorch and inference runtimes start from.
//
// Architectures: GPT2LMHeadModel (Conv1D weights stored [in, out], the fused c_attn, gelu_new,
// the tied head) and LlamaForCausalLM / MistralForCausalLM (RMSNorm, rotate-half RoPE of the
// config's rope_theta and Llama 3.1's rope_scaling, SwiGLU, GQA, the untied or tied head,
// Mistral's sliding window). Both are
// kiln's gpt with settings: the import maps names and layouts (hf_mapping.h states each tensor's
// correspondence once, for both directions) and refuses what gpt cannot express, naming the
// config key. Weights on disk may be f32, f16 or bf16 (read exactly into f32) or f64 (rounded).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/model_description.h"
#include "runtime/safetensors.h"
#include "support/status.h"

namespace kiln::interop {

// A kiln checkpoint in memory: weights under kiln's names and the description that says what
// they are (model, settings, tokenizer).
struct DescribedWeights {
  runtime::ModelDescription description;
  runtime::SafetensorsFile weights; // its metadata holds the description too
  std::string architecture;         // "GPT2LMHeadModel", ... (import: the directory's)
  // Import: the file description.endTokens come from ("generation_config.json", "config.json";
  // "": none named), and how many ids generation draws from (the tokenizer's, else the vocab's):
  // an end token past them is never generated.
  std::string endTokensFrom;
  int64_t drawnIds = 0;
  std::vector<std::string> notes; // import: ImportedConfig::notes
};

// Reads the Hugging Face directory `dir`. Errors name the file and the key or tensor: every
// malformed or unsupported config key, a tensor missing or of the wrong shape or dtype, a tensor
// kiln does not know, an unknown architecture, a tokenizer that kiln cannot read or whose
// vocabulary is larger than the model's.
Expected<DescribedWeights> importHuggingFace(const std::string &dir);

// The Hugging Face form of a kiln gpt checkpoint: the files config.json, model.safetensors and (if
// the checkpoint has a tokenizer) tokenizer.json, in the layout of the class `architecture` names
// ("Phi3ForCausalLM"; an Error where the model does not fit it), else of the one it was imported
// from (ModelDescription::hfArchitecture) where it still fits that, else the first that fits:
// GPT-2's when its settings are GPT-2's, LLaMA's (Mistral's with a window) when they are LLaMA's,
// Qwen2's with qkv_bias; an Error naming the setting that fits none.
struct HuggingFaceFiles {
  std::string configJson;
  runtime::SafetensorsFile model;
  std::string tokenizerJson; // "": none
  std::string architecture;
};
Expected<HuggingFaceFiles> exportHuggingFace(const runtime::ModelDescription &description,
                                             const runtime::SafetensorsFile &checkpoint,
                                             std::string_view architecture = "");
// The classes export writes ("GPT2LMHeadModel", "LlamaForCausalLM", ...), in its order.
std::vector<std::string> exportedArchitectures();

} // namespace kiln::interop
