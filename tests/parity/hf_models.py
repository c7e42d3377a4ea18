#!/usr/bin/env python3
"""Hugging Face checkpoints for kiln's import, and an independent PyTorch reading of them.

  make ARCH DIR [--dtype f32|f16|bf16] [--vocab N] [--tokenizer FILE]
      writes DIR/config.json (a real model's config, scaled down), DIR/model.safetensors (random
      weights under the Hugging Face names, shapes and layouts, stored in --dtype) and a copy of
      the tokenizer.json. ARCH: gpt2 (GPT-2 124M's config), tinyllama (TinyLlama-1.1B: GQA,
      untied head), smollm (SmolLM-135M: 9 heads, 3 kv heads, tied head), mistral (Mistral-7B:
      sliding window, rope_theta 1e6 here), llama32 (Llama-3.2-1B: Llama 3.1's rope_scaling, its
      original context scaled down with the rest, tied head), qwen25 (Qwen2.5-0.5B: biases on q,
      k and v, rope_theta 1e6, tied head), phi3 (Phi-3-mini-4k: q, k, v fused in qkv_proj and
      gate, up in gate_up_proj, a sliding window; here with Phi-3-medium's GQA), phi35
      (Phi-3.5-mini: Phi-3 at 128k context by longrope, its original context 32 here), phi4mini
      (Phi-4-mini: Phi-3's class, RoPE on 0.75 of each head, longrope, GQA, tied), vicuna16k
      (Vicuna-7B-v1.5-16k: Llama 2 with linear rope_scaling, factor 4), qwen25yarn (Qwen2.5
      with its README's YaRN rope_scaling, factor 4), gemma (Gemma-2B: GeGLU, embeddings scaled
      by sqrt(hidden_size), RMSNorms of 1 + weight, MQA, tied), gemma7b (Gemma-7B: heads wider
      than the width over their count, head_dim); gpt2-124m:
      GPT-2 124M at full size (for timing).
  logits DIR DUMP
      runs the batch of `kiln parity-dump --load` (DUMP/batch.safetensors) through the model in
      DIR, written below from the architectures' definitions (GPT-2's Conv1D x @ W + b and fused
      c_attn; LLaMA's RMSNorm, rotate-half RoPE, SwiGLU, repeat_kv, Qwen2's q, k, v biases,
      Phi-3's fused projections cut as its forward cuts their outputs, longrope's frequencies,
      partial rotary, linear scaling, YaRN, Gemma's norms, scale and GeGLU) -- not from kiln -- and compares the logits with kiln's
      (DUMP/kiln.safetensors) at rtol 1e-4 and atol 1e-5 plus 1e-6 of the largest |logit|, in
      f32.
  greedy DIR --ids I [I ...] --max-new N
      prints the N ids greedy decoding appends (the full window recomputed at every step).
  same A B
      whether two safetensors files hold the same tensors bit for bit (names, dtypes, shapes).
  batch FILE
      runs many of the commands above in this one process (torch takes a second or more to
      start): each line of FILE is OUT and a command; what the command prints goes to OUT, and
      its exit status (or what stopped it) to OUT.status.

Needs only torch (Debian's python3-torch 1.13); safetensors is read and written by hand.
"""

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import struct
import sys
import traceback

import torch
import torch.nn.functional as F

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]) if raw else torch.empty(0)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype in (
            torch.float16, torch.bfloat16) else t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- Configs: the real models' (as on their model cards), then the sizes scaled down ----

GPT2_124M = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
             "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
             "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
             "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
             "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
             "summary_proj_to_labels": True, "summary_type": "cls_index",
             "summary_use_proj": True, "vocab_size": 50257}
TINYLLAMA = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
             "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
             "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
             "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
             "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
             "vocab_size": 32000}
SMOLLM = {"architectures": ["LlamaForCausalLM"], "attention_bias": False,
          "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
          "hidden_size": 576, "initializer_range": 0.02, "intermediate_size": 1536,
          "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 9,
          "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1,
          "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
          "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
          "vocab_size": 49152}
MISTRAL = {"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
           "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
           "vocab_size": 32000}
LLAMA32_1B = {"architectures": ["LlamaForCausalLM"], "attention_bias": False,
              "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
              "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
              "initializer_range": 0.02, "intermediate_size": 8192,
              "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
              "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
              "pretraining_tp": 1, "rms_norm_eps": 1e-05,
              "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": 8192, "rope_type": "llama3"},
              "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "use_cache": True, "vocab_size": 128256}
QWEN25_05B = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
              "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
              "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
              "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
              "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
              "use_sliding_window": False, "vocab_size": 151936}
PHI3_MINI_4K = {"architectures": ["Phi3ForCausalLM"], "attention_bias": False,
                "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
                "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
                "initializer_range": 0.02, "intermediate_size": 8192,
                "max_position_embeddings": 4096, "model_type": "phi3",
                "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                "original_max_position_embeddings": 4096, "pad_token_id": 32000,
                "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
                "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
                "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32064}
# Vicuna-7B-v1.5-16k (and LongChat-7B-16k): Llama 2 stretched 4x by linear position interpolation.
VICUNA_16K = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
              "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
              "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
              "pad_token_id": 0, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
              "rope_scaling": {"factor": 4.0, "type": "linear"}, "tie_word_embeddings": False,
              "torch_dtype": "float16", "use_cache": True, "vocab_size": 32000}
# Phi-3.5-mini: Phi-3-mini's layers at 128k context, by longrope (48 factors of each list, one
# per frequency of its 96-wide heads; the scaled model below has 4 of each, in their range).
PHI35_MINI = dict(PHI3_MINI_4K, max_position_embeddings=131072, sliding_window=262144,
                  rope_scaling={"type": "longrope", "short_factor": [1.0] * 48,
                                "long_factor": [1.0] * 48})
# Phi-4-mini: Phi-3's class with RoPE on 0.75 of each head (96 of 128 dimensions: 48 factors a
# list), GQA 24:8, a tied head, a 200k vocabulary (the scaled model takes the tokenizer's), and
# keys transformers' Phi3 passes over (full_attn_mod, interpolate_factor, lm_head_bias).
PHI4_MINI = dict(PHI35_MINI, bos_token_id=199999, eos_token_id=199999, pad_token_id=199999,
                 full_attn_mod=1, interpolate_factor=1, lm_head_bias=False, mlp_bias=False,
                 num_attention_heads=24, num_key_value_heads=8, partial_rotary_factor=0.75,
                 tie_word_embeddings=True, vocab_size=200064)

# Gemma-2B as first released (its hidden_act "gelu", which transformers' Gemma passes over for
# hidden_activation, the tanh GELU where absent): MQA, heads of 256 that split the width.
GEMMA_2B = {"architectures": ["GemmaForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256,
            "hidden_act": "gelu", "hidden_size": 2048, "initializer_range": 0.02,
            "intermediate_size": 16384, "max_position_embeddings": 8192, "model_type": "gemma",
            "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
            "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
            "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 256000}
GEMMA_7B = dict(GEMMA_2B, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                num_attention_heads=16, num_key_value_heads=16)

SCALED = {
    "gpt2": (GPT2_124M, {"n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32,
                         "n_ctx": 32}),
    # Full size, for timing (bench: GPT-2 124M's tokens/s), not for the tests.
    "gpt2-124m": (GPT2_124M, {}),
    "tinyllama": (TINYLLAMA, {"hidden_size": 64, "num_attention_heads": 8,
                              "num_key_value_heads": 2, "intermediate_size": 176,
                              "num_hidden_layers": 2, "max_position_embeddings": 32}),
    "smollm": (SMOLLM, {"hidden_size": 72, "num_attention_heads": 9, "num_key_value_heads": 3,
                        "intermediate_size": 192, "num_hidden_layers": 2,
                        "max_position_embeddings": 32}),
    "mistral": (MISTRAL, {"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
                          "intermediate_size": 128, "num_hidden_layers": 2,
                          "max_position_embeddings": 32, "sliding_window": 4,
                          "rope_theta": 1000000.0}),
    # Head dimension 16: of its 8 frequencies 2 are kept, 1 blended and 5 slowed at an original
    # context of 256 (its wavelengths 6.3, 32, 167, 860, ... against 256/4 and 256/1).
    "llama32": (LLAMA32_1B, {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
                             "num_key_value_heads": 2, "intermediate_size": 128,
                             "num_hidden_layers": 2, "max_position_embeddings": 32,
                             "rope_scaling": dict(LLAMA32_1B["rope_scaling"],
                                                  original_max_position_embeddings=256)}),
    "qwen25": (QWEN25_05B, {"hidden_size": 64, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "intermediate_size": 128,
                            "num_hidden_layers": 2, "max_position_embeddings": 32,
                            "max_window_layers": 2, "sliding_window": 32}),
    # Phi-3-medium's 4:1 GQA (40 heads, 10 kv heads), so that qkv_proj's k and v are shorter
    # than its q; a window of 6 inside parity-dump's 8 positions.
    "phi3": (PHI3_MINI_4K, {"hidden_size": 64, "num_attention_heads": 8,
                            "num_key_value_heads": 2, "intermediate_size": 128,
                            "num_hidden_layers": 2, "max_position_embeddings": 32,
                            "original_max_position_embeddings": 32, "sliding_window": 6}),
    # 128k over 4k is a factor 32: here 1024 over 32. Heads of 8, so 4 factors a list; the
    # import's seq_len is the original 32 (short_factor); logits at 40 positions use long_factor.
    "phi35": (PHI35_MINI, {"hidden_size": 64, "num_attention_heads": 8,
                           "num_key_value_heads": 8, "intermediate_size": 128,
                           "num_hidden_layers": 2, "max_position_embeddings": 1024,
                           "original_max_position_embeddings": 32,
                           "rope_scaling": {"type": "longrope",
                                            "short_factor": [1.0, 1.12, 1.87, 3.3],
                                            "long_factor": [1.05, 2.4, 13.7, 41.5]}}),
    # Qwen2.5-7B-Instruct's long-context setting (its README's rope_scaling: yarn, factor 4 over
    # its 32768 positions), here over 4096: heads of 16 at theta 1e6 keep 2 frequencies, blend 2
    # and slow 4 (the ramp's ends c(32) = 1.7 and c(1) = 3.8, rounded outwards to 1 and 4).
    "qwen25yarn": (QWEN25_05B, {"hidden_size": 64, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 128,
                                "num_hidden_layers": 2, "max_position_embeddings": 4096,
                                "max_window_layers": 2, "sliding_window": 4096,
                                "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 4096}}),
    "gemma": (GEMMA_2B, {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
                         "intermediate_size": 128, "num_hidden_layers": 2,
                         "max_position_embeddings": 32}),
    # Gemma-7B's heads are wider than its width over their count (16 of 256 over 3072): here 4
    # of 16 over 48, and MHA (its 16 kv heads).
    "gemma7b": (GEMMA_7B, {"hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 4,
                           "head_dim": 16, "intermediate_size": 96, "num_hidden_layers": 2,
                           "max_position_embeddings": 32}),
    "vicuna16k": (VICUNA_16K, {"hidden_size": 64, "num_attention_heads": 4,
                               "num_key_value_heads": 4, "intermediate_size": 128,
                               "num_hidden_layers": 2, "max_position_embeddings": 32}),
    # Heads of 16 of which 0.75 turns 12: 6 factors a list, the other 4 dimensions unturned;
    # GQA 2:1 and a tied head as Phi-4-mini's; logits at 40 positions use long_factor.
    "phi4mini": (PHI4_MINI, {"hidden_size": 64, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 128,
                             "num_hidden_layers": 2, "max_position_embeddings": 1024,
                             "original_max_position_embeddings": 32,
                             "rope_scaling": {"type": "longrope",
                                              "short_factor": [1.0, 1.05, 1.4, 2.2, 3.1, 4.0],
                                              "long_factor": [1.0, 1.9, 6.5, 17.0, 33.0, 52.0]}}),
}


def random_weights(cfg, gen):
    """HF-named weights: matrices N(0, 1/fan_in), embeddings N(0, 1), gains 1 + 0.1 N, biases
    0.1 N, so that every layer matters at f32 tolerances."""
    def mat(rows, cols, fan_in):
        return torch.randn(rows, cols, generator=gen) / math.sqrt(fan_in)

    def vec(n, base=0.0):
        return base + 0.1 * torch.randn(n, generator=gen)

    w = {}
    if cfg["model_type"] == "gpt2":
        d, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
        ff = cfg.get("n_inner") or 4 * d
        # (Smaller than N(0, 1): the head is this matrix, and larger rows would make every
        # greedy step repeat the last token.)
        w["transformer.wte.weight"] = 0.3 * torch.randn(V, d, generator=gen)
        w["transformer.wpe.weight"] = torch.randn(P, d, generator=gen)
        for i in range(cfg["n_layer"]):
            p = f"transformer.h.{i}."
            w[p + "ln_1.weight"], w[p + "ln_1.bias"] = vec(d, 1.0), vec(d)
            w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = mat(d, 3 * d, d), vec(3 * d)
            w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = mat(d, d, d), vec(d)
            w[p + "ln_2.weight"], w[p + "ln_2.bias"] = vec(d, 1.0), vec(d)
            w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = mat(d, ff, d), vec(ff)
            w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = mat(ff, d, ff), vec(d)
            # The causal-mask buffer old GPT-2 checkpoints carry (not a weight).
            w[p + "attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
        w["transformer.ln_f.weight"], w["transformer.ln_f.bias"] = vec(d, 1.0), vec(d)
    else:
        d, V, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
        H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim") or d // H  # (Gemma-7B's heads are wider than d / H)
        q, kv = H * hd, Hkv * hd
        w["model.embed_tokens.weight"] = torch.randn(V, d, generator=gen)
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = vec(d, 1.0)
            w[p + "self_attn.q_proj.weight"] = mat(q, d, d)
            w[p + "self_attn.k_proj.weight"] = mat(kv, d, d)
            w[p + "self_attn.v_proj.weight"] = mat(kv, d, d)
            w[p + "self_attn.o_proj.weight"] = mat(d, q, q)
            if cfg["model_type"] == "qwen2":  # biases on q, k and v
                w[p + "self_attn.q_proj.bias"] = vec(q)
                w[p + "self_attn.k_proj.bias"] = vec(kv)
                w[p + "self_attn.v_proj.bias"] = vec(kv)
            w[p + "post_attention_layernorm.weight"] = vec(d, 1.0)
            w[p + "mlp.gate_proj.weight"] = mat(ff, d, d)
            w[p + "mlp.up_proj.weight"] = mat(ff, d, d)
            w[p + "mlp.down_proj.weight"] = mat(d, ff, ff)
            if cfg["model_type"] == "phi3":  # Phi-3 stores them fused
                w[p + "self_attn.qkv_proj.weight"] = torch.cat(
                    [w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
                w[p + "mlp.gate_up_proj.weight"] = torch.cat(
                    [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
        w["model.norm.weight"] = vec(d, 1.0)
        if not cfg.get("tie_word_embeddings", cfg["model_type"] == "gemma"):
            w["lm_head.weight"] = mat(V, d, d)
    return w


def tokenizer_size(path):
    """The ids a tokenizer.json uses: its vocabulary's and its added tokens'."""
    with open(path) as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def make(args):
    base, scaled = SCALED[args.arch]
    cfg = dict(base)
    cfg.update(scaled)
    cfg["vocab_size"] = args.vocab or tokenizer_size(args.tokenizer)
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gen = torch.Generator().manual_seed(args.seed)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    weights = {k: v.to(dtype) for k, v in random_weights(cfg, gen).items()}
    write_safetensors(os.path.join(args.dir, "model.safetensors"), weights, {"format": "pt"})
    if args.tokenizer:
        shutil.copy(args.tokenizer, os.path.join(args.dir, "tokenizer.json"))


# ---- The architectures, from their definitions ----

def gpt2_forward(w, cfg, ids):
    d, H = cfg["n_embd"], cfg["n_head"]
    hd, eps = d // H, cfg.get("layer_norm_epsilon", 1e-5)
    B, T = ids.shape
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def gelu_new(u):
        return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))

    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in qkv.split(d, dim=-1))
        a = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = a.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, d)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].T  # GPT-2's head is the token embedding


def llama_forward(w, cfg, ids):
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    hd, eps = cfg.get("head_dim") or d // H, cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    window = cfg.get("sliding_window") or 0
    B, T = ids.shape

    # Gemma's RMSNorm scales by 1 + its weight, its embeddings by sqrt(hidden_size), and its
    # feed-forward gates with the tanh GELU.
    gemma = cfg["model_type"] == "gemma"

    def rms_norm(u, g):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps) * (1 + g if gemma else g)

    # Phi-3's partial rotary: RoPE on the first rd = int(hd * partial_rotary_factor) dimensions
    # of each head, as a head of rd; the rest pass unturned.
    rd = int(hd * cfg.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":  # Llama 3.1's, by wavelength, three cases
        factor, low, high = (scaling[k] for k in ("factor", "low_freq_factor", "high_freq_factor"))
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen < old / high, inv_freq,
                               torch.where(wavelen > old / low, inv_freq / factor, blended))
    if scaling.get("type", scaling.get("rope_type")) == "linear":  # positions / factor
        inv_freq = inv_freq / scaling["factor"]
    mscale = 1.0
    if scaling.get("type", scaling.get("rope_type")) == "longrope":  # Phi-3's
        # One factor a frequency: long_factor once the sequence passes the original context
        # (transformers picks by the largest position), and cos, sin scaled by mscale.
        old = cfg["original_max_position_embeddings"]
        ext = torch.tensor(scaling["long_factor" if T > old else "short_factor"])
        inv_freq = 1.0 / (ext * theta ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
        factor = cfg["max_position_embeddings"] / old
        mscale = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(old))
    if scaling.get("type", scaling.get("rope_type")) == "yarn":  # YaRN, by dimension index
        factor = scaling["factor"]
        old = scaling.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

        def index(turns):  # the frequency index that turns this many times over old positions
            return rd * math.log(old / (turns * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = index(fast), index(slow)
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, rd - 1)
        hi = hi + 0.001 if hi == lo else hi
        ramp = ((torch.arange(rd // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
        inv_freq = inv_freq / factor * ramp + inv_freq * (1 - ramp)
        mscale = scaling.get("attention_factor") or (
            1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos() * mscale, emb.sin() * mscale  # [T, rd]

    def rotate_half(u):
        return torch.cat([-u[..., rd // 2:], u[..., :rd // 2]], dim=-1)

    def rope(u):
        turned, rest = u[..., :rd], u[..., rd:]
        return torch.cat([turned * cos + rotate_half(turned) * sin, rest], dim=-1)

    i_pos = torch.arange(T).view(T, 1)
    j_pos = torch.arange(T).view(1, T)
    allowed = j_pos <= i_pos
    if window:
        allowed &= (i_pos - j_pos) < window
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * torch.tensor(math.sqrt(d), dtype=torch.float32)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        def proj(name):  # Qwen2's q, k and v have biases
            y = h @ w[p + f"self_attn.{name}.weight"].T
            return y + w[p + f"self_attn.{name}.bias"] if p + f"self_attn.{name}.bias" in w else y
        if p + "self_attn.qkv_proj.weight" in w:  # Phi-3's: one product, its output cut
            qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
            cut = [H * hd, (H + Hkv) * hd]
            q, k, v = qkv[..., :cut[0]], qkv[..., cut[0]:cut[1]], qkv[..., cut[1]:]
        else:
            q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
        q = q.reshape(B, T, H, hd).transpose(1, 2)
        k = k.reshape(B, T, Hkv, hd).transpose(1, 2)
        v = v.reshape(B, T, Hkv, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // Hkv, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // Hkv, dim=1)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = a.masked_fill(~allowed, float("-inf")).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate_up_proj.weight" in w:  # Phi-3's: gate, then up
            gate, up = (h @ w[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        else:
            gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        act = F.gelu(gate, approximate="tanh") if gemma else F.silu(gate)
        x = x + (up * act) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"])
    tied = cfg.get("tie_word_embeddings", gemma)  # (GemmaConfig ties by default)
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.T


def load_model(directory):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    w = {k: v.float() for k, v in read_safetensors(os.path.join(directory, "model.safetensors")).items()}
    forward = gpt2_forward if cfg["model_type"] == "gpt2" else llama_forward
    return lambda ids: forward(w, cfg, ids)


def logits(args):
    forward = load_model(args.dir)
    batch = read_safetensors(os.path.join(args.dump, "batch.safetensors"))
    kiln = read_safetensors(os.path.join(args.dump, "kiln.safetensors"))["logits"]
    with torch.no_grad():
        torch_logits = forward(batch["tokens"])
    diff = (kiln - torch_logits).abs()
    # A logit's f32 rounding grows with the products summed into it, as large as the largest
    # logit, not with the logit itself: atol is 1e-5 plus 1e-6 of the largest |logit| (Llama 3's
    # 128256 logits reach 52 here, and f32 PyTorch and kiln each differ from f64 by 2e-5).
    atol = 1e-5 + 1e-6 * torch_logits.abs().max().item()
    bound = atol + 1e-4 * torch_logits.abs()
    worst = (diff - bound).max().item()
    print(f"{args.dir}: logits {list(kiln.shape)}, max |kiln - torch| {diff.max().item():.3g} "
          f"({'ok' if worst <= 0 else 'MISMATCH'} at rtol 1e-4, atol {atol:.2g})")
    return 0 if worst <= 0 else 1


def greedy(args):
    forward = load_model(args.dir)
    ids = list(args.ids)
    with torch.no_grad():
        for _ in range(args.max_new):
            ids.append(int(forward(torch.tensor([ids]))[0, -1].argmax()))
    print(" ".join(str(i) for i in ids[len(args.ids):]))
    return 0


def same(args):
    a, b = read_safetensors(args.a), read_safetensors(args.b)
    bad = [n for n in sorted(set(a) | set(b))
           if n not in a or n not in b or a[n].dtype != b[n].dtype or a[n].shape != b[n].shape
           or not torch.equal(a[n].view(-1).view(torch.uint8) if a[n].dtype != torch.bool
                              else a[n], b[n].view(-1).view(torch.uint8) if b[n].dtype != torch.bool
                              else b[n])]
    print(f"{args.a} vs {args.b}: {len(a)} tensors, {'bit for bit the same' if not bad else 'differ: ' + ', '.join(bad[:5])}")
    return 0 if not bad else 1


def batch(args):
    with open(args.file) as f:
        lines = [shlex.split(line) for line in f if line.strip()]
    for out, *words in lines:
        with open(out, "w") as o, contextlib.redirect_stdout(o), contextlib.redirect_stderr(o):
            try:  # (a command's None is sys.exit's 0)
                status = run(words) or 0
            except SystemExit as e:  # (argparse's)
                status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            except Exception:
                traceback.print_exc(file=o)
                status = 1
        with open(out + ".status", "w") as o:
            o.write(f"{status}\n")
    return 0


def run(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("arch", choices=sorted(SCALED))
    m.add_argument("dir")
    m.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    m.add_argument("--vocab", type=int, default=0, help="default: the tokenizer's")
    m.add_argument("--tokenizer")
    m.add_argument("--seed", type=int, default=0)
    lg = sub.add_parser("logits")
    lg.add_argument("dir")
    lg.add_argument("dump")
    g = sub.add_parser("greedy")
    g.add_argument("dir")
    g.add_argument("--ids", type=int, nargs="+", required=True)
    g.add_argument("--max-new", type=int, required=True)
    s = sub.add_parser("same")
    s.add_argument("a")
    s.add_argument("b")
    b = sub.add_parser("batch")
    b.add_argument("file")
    args = p.parse_args(argv)
    commands = {"make": make, "logits": logits, "greedy": greedy, "same": same, "batch": batch}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
