// config.json objects of Hugging Face models, scaled down to a few numbers, that the import's
// tests (tests/interop/huggingface_test.cc with tensors, huggingface_config_test.cc without)
// start from.
#pragma once

#include "runtime/json_text.h"

namespace kiln::testing_hf {

using runtime::Json;

// LLaMA's config with d 8, 2 heads, 1 layer, d_ff 16, vocab 10 (the config alone: no tensors).
inline Json tinyLlamaConfig() {
  return Json{{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 10},
              {"hidden_size", 8},
              {"num_hidden_layers", 1},
              {"num_attention_heads", 2},
              {"intermediate_size", 16}};
}

// Llama 3.2 1B's rope_scaling.
inline Json llama3Scaling() {
  return Json{{"factor", 32.0},
              {"high_freq_factor", 4.0},
              {"low_freq_factor", 1.0},
              {"original_max_position_embeddings", 8192},
              {"rope_type", "llama3"}};
}

// Phi-3's: tinyLlamaConfig's sizes with 1 kv head and a window of 3, RoPE unscaled.
inline Json phi3Config() {
  Json c = tinyLlamaConfig();
  c["architectures"] = {"Phi3ForCausalLM"};
  c["model_type"] = "phi3";
  c["num_key_value_heads"] = 1;
  c["sliding_window"] = 3;
  c["rope_scaling"] = nullptr;
  c["original_max_position_embeddings"] = 4096; // (longrope's alone)
  c["partial_rotary_factor"] = 1.0;
  return c;
}

// Phi-3-mini-128k's and Phi-3.5-mini's rope_scaling: longrope, each frequency divided by its own
// factor; its factor (for cos and sin's magnitude) max_position_embeddings / the original 4096.
inline Json phi3LongRopeConfig() {
  Json c = phi3Config();
  c["max_position_embeddings"] = 131072;
  c["rope_scaling"] = {
      {"type", "longrope"}, {"short_factor", {1.0, 1.5}}, {"long_factor", {2.0, 3.0}}};
  return c;
}

} // namespace kiln::testing_hf
