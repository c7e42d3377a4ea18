#!/usr/bin/env python3
"""End-to-end parity of kiln with PyTorch on one model, batch and optimizer step.

Reads a directory written by `kiln parity-dump MODEL --out DIR` (config.json,
weights.safetensors, batch.safetensors, kiln.safetensors), builds the same model as an
ordinary PyTorch nn.Module written from the papers and the usual PyTorch idioms (not from
kiln's IR), loads kiln's weights by name (strict both ways), runs the batch in float32,
backpropagates, and compares loss, logits and every parameter gradient with kiln's. With an
optimizer dump it also applies torch.optim.SGD/Adam/AdamW to kiln's own gradients and compares
the updated parameters with kiln's. Exits 1 on any mismatch (|kiln - torch| > atol + rtol |torch|).
Given several directories, it checks each in turn in this one process (a line each).

Why: kiln has its own autodiff, op semantics and optimizer graphs; this is the check that all of
them together compute what PyTorch users mean by "GPT", "BERT" and "the Transformer".

Where kiln deliberately departs from the standard definition, the module below mirrors kiln
*and says so*: each such place calls note(KEY) and the run prints the notes (see DEVIATIONS).

Needs only torch (Debian's python3-torch 1.13); the safetensors files are read by hand.
"""

import argparse
import json
import math
import struct
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

# Places where kiln's model is not the textbook/PyTorch one; mirrored here, and reported.
# f32's default tolerances: of every check in f32, and of the optimizer step in both precisions.
F32_RTOL, F32_ATOL = 1e-4, 1e-5

DEVIATIONS = {
    "tgt_pad_query_self": (
        "transformer: a padding query in the decoder self-attention may also attend itself "
        "(kiln's targetMask ORs the diagonal into the key-padding mask); the Annotated "
        "Transformer's mask (tgt != pad) & subsequent_mask does not. Changes the logits at "
        "padding target positions only (their targets are ignored by the loss)."),
}
_notes = set()


def note(key):
    _notes.add(key)


# ---- safetensors (json header + raw little-endian bytes) ----

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
           "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
           "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if end > begin:
            t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


# ---- configuration ----

class Config:
    """kiln's resolved settings (all strings in config.json), typed."""

    def __init__(self, model, raw):
        self.model = model
        self.raw = raw
        i = lambda k: int(raw[k])
        b = lambda k: raw[k] == "true"
        self.batch, self.vocab, self.d_model = i("batch"), i("vocab"), i("d_model")
        self.n_heads, self.d_ff = i("n_heads"), i("d_ff")
        self.n_kv_heads = i("n_kv_heads") or self.n_heads
        if model == "t5":  # T5 fixes these: pre-norm RMSNorm, no positions but its buckets, no bias
            raw = dict(raw, norm="pre", norm_kind="rmsnorm", position="none", relative_k="0",
                       max_len="0", bias="false")
            self.num_buckets, self.max_distance = i("num_buckets"), i("max_distance")
        self.raw = raw
        self.norm, self.norm_kind = raw["norm"], raw["norm_kind"]
        self.position, self.relative_k, self.max_len = raw["position"], i("relative_k"), i("max_len")
        self.activation = raw["activation"]
        self.norm_eps = self.resolve_norm_eps(raw["norm_eps"])
        self.tie, self.bias = raw["tie_embeddings"] == "true", raw["bias"] == "true"
        self.pad_id = i("pad_id")
        self.window = int(raw.get("window", "0"))  # gpt and bert: sliding-window attention
        self.label_smoothing = float(raw["label_smoothing"])
        ig = raw["ignore_index"]
        self.ignore_index = self.pad_id if ig == "pad_id" else int(ig)
        if float(raw["dropout"]) != 0 or raw["dtype"] != "f32":
            raise SystemExit("torch_parity: needs dropout=0 and dtype=f32")

    def resolve_norm_eps(self, text):
        """norm_eps=auto is each model's usual eps: BERT's 1e-12 (its reference code and Hugging
        Face's layer_norm_eps), PyTorch's nn.LayerNorm 1e-5 otherwise, LLaMA's RMSNorm 1e-6."""
        if text != "auto":
            return float(text)
        if self.norm_kind == "rmsnorm":
            return 1e-6
        return 1e-12 if self.model == "bert" else 1e-5


# ---- layers ----

class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019 (as in LLaMA): x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(cfg, dim=None):
    dim = dim or cfg.d_model
    if cfg.norm_kind == "layernorm":
        return nn.LayerNorm(dim, eps=cfg.norm_eps)
    return RMSNorm(dim, eps=cfg.norm_eps)


def activation(name, x):
    """The per-element activations; "gelu" is the exact (erf) one."""
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "softplus":
        return F.softplus(x)
    raise ValueError(name)


class FeedForward(nn.Module):
    """fc2(act(fc1(x))), or SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.act = cfg.activation
        d, f, bias = cfg.d_model, cfg.d_ff, cfg.bias
        if self.act == "swiglu":
            self.gate_proj = nn.Linear(d, f, bias=bias)
            self.up_proj = nn.Linear(d, f, bias=bias)
            self.down_proj = nn.Linear(f, d, bias=bias)
        else:
            self.fc1 = nn.Linear(d, f, bias=bias)
            self.fc2 = nn.Linear(f, d, bias=bias)

    def forward(self, x):
        if self.act == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.fc2(activation(self.act, self.fc1(x)))


def sinusoidal_table(length, d):
    """Vaswani et al. 3.5 (Annotated Transformer): PE[t, 2i] = sin, PE[t, 2i+1] = cos."""
    pe = torch.zeros(length, d)
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, base=10000.0):
    """RoPE in the GPT-NeoX / LLaMA (Hugging Face) rotate-half form; x [B, H, T, D]."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def alibi_slopes(n):
    """Press et al.'s reference get_slopes (also right for n not a power of two)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][:n - closest]


def alibi_bias(heads, t, s):
    """-m_h |i - j|: the paper's causal bias m_h (j - i) where j <= i, made symmetric for
    bidirectional attention. [H, T, S]"""
    m = torch.tensor(alibi_slopes(heads), dtype=torch.float32).view(heads, 1, 1)
    dist = (torch.arange(s).view(1, s) - torch.arange(t).view(t, 1)).abs().to(torch.float32)
    return -m * dist


class Attention(nn.Module):
    """Multi-head attention (MHA / GQA / MQA) with the positions that act inside it."""

    def __init__(self, cfg, self_attention):
        super().__init__()
        d = cfg.d_model
        self.h, self.h_kv = cfg.n_heads, cfg.n_kv_heads
        self.d_head = d // self.h
        self.position = cfg.position if self_attention else "none"
        self.k_clip = cfg.relative_k
        self.scale = 1.0 if cfg.model == "t5" else 1.0 / math.sqrt(self.d_head)  # T5: unscaled
        self.q_proj = nn.Linear(d, d, bias=cfg.bias)
        self.k_proj = nn.Linear(d, self.h_kv * self.d_head, bias=cfg.bias)
        self.v_proj = nn.Linear(d, self.h_kv * self.d_head, bias=cfg.bias)
        self.o_proj = nn.Linear(d, d, bias=cfg.bias)
        if self.position == "relative":  # Shaw et al. 2018, shared by all heads
            self.relative_key = nn.Embedding(2 * self.k_clip + 1, self.d_head)
            self.relative_value = nn.Embedding(2 * self.k_clip + 1, self.d_head)

    def forward(self, x, memory=None, keep=None, bias=None):
        """x [B, T, d], memory [B, S, d] (None: self-attention), keep: bool, True = may attend,
        broadcasting to [B, H, T, S]; bias: added to the scaled scores (T5's position bias)."""
        kv = x if memory is None else memory
        bsz, t, _ = x.shape
        s = kv.shape[1]
        q = self.q_proj(x).view(bsz, t, self.h, self.d_head).transpose(1, 2)
        k = self.k_proj(kv).view(bsz, s, self.h_kv, self.d_head).transpose(1, 2)
        v = self.v_proj(kv).view(bsz, s, self.h_kv, self.d_head).transpose(1, 2)
        if self.position == "rope":
            q, k = apply_rope(q), apply_rope(k)
        if self.h_kv != self.h:  # LLaMA's repeat_kv: query head i reads kv head i // G
            k = k.repeat_interleave(self.h // self.h_kv, dim=1)
            v = v.repeat_interleave(self.h // self.h_kv, dim=1)
        scale = self.scale
        scores = products(q, k.transpose(-2, -1)) * scale  # [B, H, T, S]
        if bias is not None:  # T5's position bias
            scores = scores + bias
        if self.position == "relative":
            rel = torch.arange(s).view(1, s) - torch.arange(t).view(t, 1)
            idx = rel.clamp(-self.k_clip, self.k_clip) + self.k_clip  # [T, S]
            scores = scores + per_query(q, self.relative_key(idx).transpose(1, 2)) * scale
        if self.position == "alibi":
            scores = scores + alibi_bias(self.h, t, s)
        dead = None
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
            # A query that may attend no key (a padding position whose sliding window holds only
            # padding) gets probabilities 0 in kiln (softmax's guard), not PyTorch's NaN.
            dead = ~keep.any(-1, keepdim=True)
            scores = scores.masked_fill(dead, 0.0)
        p = F.softmax(scores, dim=-1)
        if dead is not None:
            p = p.masked_fill(dead, 0.0)
        # kiln fuses this into attention (the relative logits as its bias), whose bf16 products
        # round the probabilities before their division by the row sum (Bf16Attention); Shaw's
        # relative values read the normalised p.
        out = Bf16Attention.apply(scores, v, dead) if BF16_PRODUCTS else torch.matmul(p, v)
        if self.position == "relative":
            out = out + per_query(p, self.relative_value(idx))
        out = out.transpose(1, 2).reshape(bsz, t, self.h * self.d_head)
        return self.o_proj(out)


def sublayer(x, norm, pre, f):
    """Pre-LN: x + f(norm(x)); post-LN: norm(x + f(x))."""
    return x + f(norm(x)) if pre else norm(x + f(x))


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.ln1, self.attn = make_norm(cfg), Attention(cfg, True)
        self.ln2, self.mlp = make_norm(cfg), FeedForward(cfg)

    def forward(self, x, keep, bias=None):
        x = sublayer(x, self.ln1, self.pre, lambda y: self.attn(y, keep=keep, bias=bias))
        return sublayer(x, self.ln2, self.pre, self.mlp)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.ln1, self.self_attn = make_norm(cfg), Attention(cfg, True)
        self.ln2, self.cross_attn = make_norm(cfg), Attention(cfg, False)
        self.ln3, self.mlp = make_norm(cfg), FeedForward(cfg)

    def forward(self, x, memory, self_keep, cross_keep, self_bias=None):
        x = sublayer(x, self.ln1, self.pre, lambda y: self.self_attn(y, keep=self_keep, bias=self_bias))
        x = sublayer(x, self.ln2, self.pre, lambda y: self.cross_attn(y, memory, keep=cross_keep))
        return sublayer(x, self.ln3, self.pre, self.mlp)


def absolute_positions(cfg, module, length):
    """What is added to the token embeddings: a learned table, the sinusoids, or nothing."""
    if cfg.position == "learned":
        return module.weight[:length]
    if cfg.position == "sinusoidal":
        return sinusoidal_table(length, cfg.d_model)
    return 0.0


def causal_mask(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def window_keep(t, window, causal):
    """Sliding-window attention: query i sees keys j with |i - j| < window -- causal, the last
    `window` positions (Mistral's sliding_window); else window - 1 on each side (Longformer)."""
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    keep = (i - j).abs() < window
    return keep & (j <= i) if causal else keep


def padding_keep(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]  # [B, 1, 1, S]: keys that are not padding


# ---- models ----

class GPT(nn.Module):
    def __init__(self, cfg, n_layers):
        super().__init__()
        self.cfg = cfg
        self.tok_embed = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.position == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(EncoderLayer(cfg) for _ in range(n_layers))
        if cfg.norm == "pre":
            self.ln_f = make_norm(cfg)
        if not cfg.tie:
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok_embed(tokens) + absolute_positions(self.cfg, getattr(self, "pos_embed", None), t)
        keep = window_keep(t, self.cfg.window, True) if self.cfg.window else causal_mask(t)
        for block in self.blocks:
            x = block(x, keep)
        if self.cfg.norm == "pre":
            x = self.ln_f(x)
        return F.linear(x, self.tok_embed.weight) if self.cfg.tie else self.lm_head(x)


class BertEmbeddings(nn.Module):
    def __init__(self, cfg, type_vocab):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.position == "learned":
            self.position_embeddings = nn.Embedding(cfg.max_len, cfg.d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab, cfg.d_model)
        self.norm = make_norm(cfg)
        self.cfg = cfg

    def forward(self, tokens, types):
        pos = absolute_positions(self.cfg, getattr(self, "position_embeddings", None), tokens.shape[1])
        return self.norm(self.word_embeddings(tokens) + pos + self.token_type_embeddings(types))


class MlmHead(nn.Module):
    """BERT's BertPredictionHeadTransform + decoder: norm(act(dense(h))) with the model's
    hidden_act; a SwiGLU model (no per-element activation to reuse) uses exact GELU here."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.dense = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.norm = make_norm(cfg)
        if not cfg.tie:
            self.decoder = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.bias:
            self.bias = nn.Parameter(torch.zeros(cfg.vocab))

    def forward(self, h, word_embedding):
        act = "gelu" if self.cfg.activation == "swiglu" else self.cfg.activation
        x = self.norm(activation(act, self.dense(h)))
        logits = F.linear(x, word_embedding) if self.cfg.tie else self.decoder(x)
        return logits + self.bias if self.cfg.bias else logits


class Bert(nn.Module):
    def __init__(self, cfg, n_layers, type_vocab):
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg, type_vocab)
        self.blocks = nn.ModuleList(EncoderLayer(cfg) for _ in range(n_layers))
        if cfg.norm == "pre":
            self.ln_f = make_norm(cfg)
        self.mlm = MlmHead(cfg)

    def forward(self, tokens, token_types):
        x = self.embeddings(tokens, token_types)
        keep = padding_keep(tokens, self.cfg.pad_id)
        if self.cfg.window:
            keep = keep & window_keep(tokens.shape[1], self.cfg.window, False)
        for block in self.blocks:
            x = block(x, keep)
        if self.cfg.norm == "pre":
            x = self.ln_f(x)
        return self.mlm(x, self.embeddings.word_embeddings.weight)


class Stack(nn.Module):
    """One side of the encoder-decoder: positions, layers and (pre-LN) the final norm; the
    token embedding is its own only when the embeddings are not shared."""

    def __init__(self, cfg, layer, n_layers):
        super().__init__()
        self.cfg = cfg
        if not cfg.tie:
            self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.position == "learned":
            self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(layer(cfg) for _ in range(n_layers))
        if cfg.norm == "pre":
            self.ln_f = make_norm(cfg)

    def embed_tokens(self, tokens, shared):
        embed = shared if self.cfg.tie else self.embed
        x = embed(tokens) * math.sqrt(self.cfg.d_model)  # section 3.4
        return x + absolute_positions(self.cfg, getattr(self, "pos_embed", None), tokens.shape[1])

    def final(self, x):
        return self.ln_f(x) if self.cfg.norm == "pre" else x


class Transformer(nn.Module):
    def __init__(self, cfg, n_enc, n_dec):
        super().__init__()
        self.cfg = cfg
        if cfg.tie:
            self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.encoder = Stack(cfg, EncoderLayer, n_enc)
        self.decoder = Stack(cfg, DecoderLayer, n_dec)
        if not cfg.tie:
            self.generator = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, src, tgt):
        shared = self.embed if self.cfg.tie else None
        src_keep = padding_keep(src, self.cfg.pad_id)
        x = self.encoder.embed_tokens(src, shared)
        for layer in self.encoder.blocks:
            x = layer(x, src_keep)
        memory = self.encoder.final(x)

        t = tgt.shape[1]
        tgt_keep = causal_mask(t) & padding_keep(tgt, self.cfg.pad_id)  # [B, 1, T, T]
        # kiln deviation (see DEVIATIONS): a query may always attend itself.
        kiln_keep = tgt_keep | torch.eye(t, dtype=torch.bool)
        if not torch.equal(kiln_keep, tgt_keep):
            note("tgt_pad_query_self")
        y = self.decoder.embed_tokens(tgt, shared)
        for layer in self.decoder.blocks:
            y = layer(y, memory, kiln_keep, src_keep)
        y = self.decoder.final(y)
        return F.linear(y, self.embed.weight) if self.cfg.tie else self.generator(y)


def t5_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Hugging Face's T5Attention._relative_position_bucket, as written there (float32 log)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class T5Bias(nn.Module):
    """One stack's relative position bias: a learned value per bucket and head. [1, H, T, S]"""

    def __init__(self, cfg, bidirectional):
        super().__init__()
        self.cfg, self.bidirectional = cfg, bidirectional
        self.relative_attention_bias = nn.Parameter(torch.zeros(cfg.num_buckets, cfg.n_heads))

    def forward(self, t, s):
        rel = torch.arange(s)[None, :] - torch.arange(t)[:, None]  # memory - query position
        buckets = t5_relative_position_bucket(rel, self.bidirectional, self.cfg.num_buckets,
                                              self.cfg.max_distance)
        return self.relative_attention_bias[buckets].permute(2, 0, 1).unsqueeze(0)


class T5Stack(nn.Module):
    def __init__(self, cfg, layer, n_layers, bidirectional):
        super().__init__()
        self.relative_bias = T5Bias(cfg, bidirectional)
        self.blocks = nn.ModuleList(layer(cfg) for _ in range(n_layers))
        self.ln_f = make_norm(cfg)


class T5(nn.Module):
    """Hugging Face's T5 (pre-norm T5LayerNorm, no biases, unscaled attention, the position bias
    of each stack's first layer shared by all its layers, the tied head scaled by d_model^-0.5),
    with kiln's parameter names. Dropout 0."""

    def __init__(self, cfg, n_enc, n_dec):
        super().__init__()
        self.cfg = cfg
        self.shared = nn.Embedding(cfg.vocab, cfg.d_model)
        self.encoder = T5Stack(cfg, EncoderLayer, n_enc, True)
        self.decoder = T5Stack(cfg, DecoderLayer, n_dec, False)
        if not cfg.tie:
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, src, tgt):
        s, t = src.shape[1], tgt.shape[1]
        src_keep = padding_keep(src, self.cfg.pad_id)
        x = self.shared(src)
        bias = self.encoder.relative_bias(s, s)
        for layer in self.encoder.blocks:
            x = layer(x, src_keep, bias)
        memory = self.encoder.ln_f(x)
        y = self.shared(tgt)
        bias = self.decoder.relative_bias(t, t)
        for layer in self.decoder.blocks:
            y = layer(y, memory, causal_mask(t), src_keep, bias)
        y = self.decoder.ln_f(y)
        if self.cfg.tie:
            return products(y * self.cfg.d_model ** -0.5, self.shared.weight.t())
        return self.lm_head(y)


def build(model, raw):
    cfg = Config(model, raw)
    if model == "gpt":
        return GPT(cfg, int(raw["n_layers"])), cfg, ("tokens",)
    if model == "bert":
        return Bert(cfg, int(raw["n_layers"]), int(raw["type_vocab"])), cfg, ("tokens", "token_types")
    if model == "transformer":
        net = Transformer(cfg, int(raw["n_encoder_layers"]), int(raw["n_decoder_layers"]))
        return net, cfg, ("src", "tgt")
    if model == "t5":
        net = T5(cfg, int(raw["n_encoder_layers"]), int(raw["n_decoder_layers"]))
        return net, cfg, ("src", "tgt")
    raise SystemExit(f"torch_parity: unknown model {model}")


# ---- mixed precision (kiln parity-dump --precision bf16) ----

def round_bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


class Bf16Products(torch.autograd.Function):
    """x w^T with bf16 products, kiln's matmul{bf16_products}: each operand rounded to bf16 (to
    nearest even, as .to(torch.bfloat16) does), the products summed in f32; and its gradients the
    same way, dx = dy w and dw = dy^T x with their operands rounded (kiln's gradient products
    keep the forward's precision)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return round_bf16(x) @ round_bf16(w).t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        rows = round_bf16(dy).reshape(-1, dy.shape[-1])
        return round_bf16(dy) @ round_bf16(w), rows.t() @ round_bf16(x).reshape(-1, x.shape[-1])


class Bf16Matmul(torch.autograd.Function):
    """a @ b (batched, one batch shape) with bf16 products, and its gradients the same way:
    da = dy b^T, db = a^T dy with their operands rounded (kiln's unfused attention products)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return round_bf16(a) @ round_bf16(b)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        g = round_bf16(dy)
        return g @ round_bf16(b).transpose(-2, -1), round_bf16(a).transpose(-2, -1) @ g


class Bf16Attention(torch.autograd.Function):
    """softmax(scores) v as kiln's attention{bf16_products} (ir/ops/fused.h): e = exp(scores - m)
    rounded before the division by its sum, out = (r(e) r(v)) / sum e; dead rows (no allowed key)
    give 0. Its backward is attention_backward's: p = e / sum, dv = r(p)^T r(dout),
    dp = r(dout) r(v)^T, dscores = p (dp - <dout, out>)."""

    @staticmethod
    def forward(ctx, scores, v, dead):
        e = torch.exp(scores - scores.amax(-1, keepdim=True))
        if dead is not None:
            e = e.masked_fill(dead, 0.0)
        total = e.sum(-1, keepdim=True).clamp_min(1.0)
        out = (round_bf16(e) @ round_bf16(v)) / total
        ctx.save_for_backward(e / total, v, out)
        return out

    @staticmethod
    def backward(ctx, dout):
        p, v, out = ctx.saved_tensors
        g = round_bf16(dout)
        dv = round_bf16(p).transpose(-2, -1) @ g
        dp = g @ round_bf16(v).transpose(-2, -1)
        delta = (dout * out).sum(-1, keepdim=True)
        return p * (dp - delta), dv, None


BF16_PRODUCTS = False


def products(a, b):
    """a @ b, with bf16 products under --precision bf16."""
    return Bf16Matmul.apply(a, b) if BF16_PRODUCTS else torch.matmul(a, b)


def per_query(x, table):
    """x [B, H, T, n] times a matrix per query position, table [T, n, m] -> [B, H, T, m]: Shaw's
    relative logits (q a^K) and values (p a^V), one product per position as kiln's matmuls."""
    b, h, t, n = x.shape
    y = products(x.permute(2, 0, 1, 3).reshape(t, b * h, n), table)  # [T, B H, m]
    return y.reshape(t, b, h, -1).permute(1, 2, 0, 3)


_F32_LINEAR = F.linear


def _bf16_linear(x, w, b=None):
    y = Bf16Products.apply(x, w)
    return y if b is None else y + b


def use_bf16_products(on):
    """Every linear layer, tied output projection (F.linear) and attention product takes bf16
    products (on), as kiln's bf16-products pass marks every matmul and attention, or f32 ones."""
    global BF16_PRODUCTS
    BF16_PRODUCTS = on
    F.linear = _bf16_linear if on else _F32_LINEAR


# ---- comparison ----

class Checker:
    """Two tests per tensor. Elementwise, the brief's: |kiln - torch| <= atol + rtol |torch|.
    Normwise: ||kiln - torch|| <= rtol ||torch|| + floor sqrt(n), floor = atol / 100 (an RMS
    error far below atol; atol / 10 with bf16 products, whose rounding noise is 2^-9 relative),
    which catches a systematic error in a tensor whose entries all lie below atol -- a key
    projection's gradient is often that small -- while a tensor that is zero in exact arithmetic
    (the key bias's gradient: softmax ignores a shift common to all keys) passes on rounding
    noise. With bf16 products (bf16=True) the elementwise atol grows to rtol times the tensor's
    RMS where that is more: rounding an operand to bf16 moves a product by 2^-9 of the operands'
    magnitude, not of the result's, and where kiln's and PyTorch's f32 sums round an operand of a
    later product to neighbouring bf16 values (one element in thousands, the reference backend's
    f64 sums against PyTorch's f32), that row moves by ~2^-8 of its scale: a BERT's logit of 0.043
    came out 0.047 where the logits' RMS is ~1 (normwise 4.7e-4), which is noise, not a bug."""

    def __init__(self, rtol, atol, verbose, floor_fraction=0.01, bf16=False):
        self.rtol, self.atol, self.verbose = rtol, atol, verbose
        self.floor_fraction = floor_fraction
        self.bf16 = bf16
        self.failures = []
        self.worst = {}  # kind -> (max abs error, max normwise relative error)

    def compare(self, kind, name, kiln, ref):
        kiln, ref = kiln.detach().to(torch.float64), ref.detach().to(torch.float64)
        if kiln.shape != ref.shape:
            self.failures.append(name)
            print(f"FAIL {name}: kiln shape {list(kiln.shape)} vs torch {list(ref.shape)}")
            return
        n = max(kiln.numel(), 1)
        err = (kiln - ref).abs()
        atol = self.atol
        if self.bf16 and ref.numel():
            atol = max(atol, self.rtol * float(ref.pow(2).mean().sqrt()))
        excess = err - (atol + self.rtol * ref.abs())
        floor = self.atol * self.floor_fraction * math.sqrt(n)
        finite = bool(torch.isfinite(kiln).all()) and bool(torch.isfinite(ref).all())
        norm_bad = float(err.norm()) > self.rtol * float(ref.norm()) + floor
        bad = not finite or bool((excess > 0).any()) or norm_bad
        k = int(excess.reshape(-1).argmax()) if excess.numel() else 0
        max_abs = float(err.max()) if err.numel() else 0.0
        norm_rel = float(err.norm()) / max(float(ref.norm()), 1e-30)
        wa, wr = self.worst.get(kind, (0.0, 0.0))
        # Normwise relative error only where it means something: tensors above the floor.
        self.worst[kind] = (max(wa, max_abs), max(wr, norm_rel) if float(ref.norm()) > floor else wr)
        if bad:
            self.failures.append(name)
        if bad or self.verbose:
            where, rest = [], k
            for size in reversed(kiln.shape):  # unravel k (torch 1.13 has no unravel_index)
                where.insert(0, rest % size)
                rest //= size
            print(f"{'FAIL' if bad else 'ok  '} {name:<44} max|d| {max_abs:.2e}  |d|/|t| {norm_rel:.1e}"
                  f"  worst at {where}: kiln {float(kiln.reshape(-1)[k]):.7g}"
                  f" torch {float(ref.reshape(-1)[k]):.7g}")


def torch_optimizer(spec, params):
    kind = spec["kind"]
    if kind == "sgd":
        return torch.optim.SGD(params, lr=spec["lr"], momentum=spec["momentum"],
                               nesterov=spec["nesterov"], weight_decay=spec["weight_decay"])
    betas = (spec["beta1"], spec["beta2"])
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=spec["lr"], betas=betas, eps=spec["eps"], weight_decay=spec["weight_decay"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="+", help="directories written by `kiln parity-dump` (one "
                    "process for many: torch takes a second or more to start)")
    ap.add_argument("--rtol", type=float, default=None, help="default 1e-4 (f32), 2e-2 (bf16)")
    ap.add_argument("--atol", type=float, default=None, help="default 1e-5 (f32), 2e-3 (bf16)")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per tensor, not only failures")
    args = ap.parse_args()
    failed = []
    for d in args.dir:
        try:
            if check_dump(d, args):
                failed.append(d)
        except Exception:  # (the next directories are still checked)
            traceback.print_exc()
            print(f"FAIL {d}: could not be checked")
            failed.append(d)
    if len(args.dir) > 1:
        print(f"torch_parity.py: {len(args.dir)} directories, {len(failed)} failed"
              + "".join(f"\n  failed: {d}" for d in failed))
    return 1 if failed else 0


def check_dump(directory, args):
    """Compares the dump in directory with PyTorch, printing the result: 1 on a mismatch."""
    torch.manual_seed(0)
    _notes.clear()
    with open(f"{directory}/config.json") as f:
        meta = json.load(f)
    weights = read_safetensors(f"{directory}/weights.safetensors")
    batch = read_safetensors(f"{directory}/batch.safetensors")
    kiln = read_safetensors(f"{directory}/kiln.safetensors")
    bf16 = meta.get("precision") == "bf16"
    use_bf16_products(bf16)
    # bf16 products: an operand whose f32 value differs in its last bit from torch's (another sum
    # order) rounds to the neighbouring bf16, 2^-8 away, near a tie, and later layers widen that.
    rtol = args.rtol if args.rtol is not None else 2e-2 if bf16 else F32_RTOL
    atol = args.atol if args.atol is not None else 2e-3 if bf16 else F32_ATOL
    model, cfg, input_names = build(meta["model"], meta["config"])
    label = meta["model"] + " " + " ".join(f"{k}={v}" for k, v in meta["settings"].items() if k != "loss")
    label += f" [{meta.get('backend', 'reference')}, {meta.get('precision', 'f32')}]"

    # Strict both ways: every torch parameter gets a kiln tensor and every kiln tensor is used.
    model.load_state_dict(weights, strict=True)
    logits = model(*(batch[n] for n in input_names))
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), batch["targets"].reshape(-1),
                           ignore_index=cfg.ignore_index, label_smoothing=cfg.label_smoothing)
    loss.backward()

    check = Checker(rtol, atol, args.verbose, 0.1 if bf16 else 0.01, bf16)
    check.compare("loss", "loss", kiln["loss"], loss)
    check.compare("logits", "logits", kiln["logits"], logits)
    params = dict(model.named_parameters())
    for name, p in params.items():
        if f"grad.{name}" not in kiln:
            check.failures.append(name)
            print(f"FAIL {name}: kiln wrote no grad.{name}")
        elif p.grad is None:  # loaded, but the torch forward never reads it
            check.failures.append(name)
            print(f"FAIL {name}: a kiln parameter that the torch model does not use")
        else:
            check.compare("grad", f"grad.{name}", kiln[f"grad.{name}"], p.grad)
    extra = sorted(k[5:] for k in kiln if k.startswith("grad.") and k[5:] not in params)
    for name in extra:
        check.failures.append(name)
        print(f"FAIL grad.{name}: no such parameter in the torch model")

    spec = meta.get("optimizer")
    if spec:
        # torch.optim on kiln's own gradients, from kiln's weights: one step from zero state.
        leaves = {n: nn.Parameter(weights[n].clone()) for n in params if f"grad.{n}" in kiln}
        for n, p in leaves.items():
            p.grad = kiln[f"grad.{n}"].clone()
        torch_optimizer(spec, list(leaves.values())).step()
        # f32's tolerances even with bf16 products: both steps start from the same weights and
        # gradients, so no product's rounding is between them (bf16's atol of 2e-3 is more than
        # a whole step at lr 1e-3, and passed a step that was never applied).
        steps = Checker(args.rtol if args.rtol is not None else F32_RTOL,
                        args.atol if args.atol is not None else F32_ATOL, args.verbose)
        for n, p in leaves.items():
            if f"new.{n}" in kiln:
                steps.compare("step", f"new.{n}", kiln[f"new.{n}"], p)
            else:
                steps.failures.append(f"new.{n}")
                print(f"FAIL new.{n}: kiln wrote no updated value")
        check.failures += steps.failures
        check.worst.update(steps.worst)

    for key in sorted(_notes):
        print(f"note: kiln deviates from the standard model here: {DEVIATIONS[key]}")
    opt = f" + {spec['kind']} step" if spec else ""
    worst = "  ".join(f"{k} {a:.1e}/{r:.1e}" for k, (a, r) in check.worst.items())
    status = "FAIL" if check.failures else "PASS"
    print(f"{status} {label}{opt}: loss kiln {float(kiln['loss']):.6f} torch {float(loss):.6f}; "
          f"max abs error / normwise rel error: {worst}"
          + (f"; {len(check.failures)} mismatched tensors" if check.failures else ""))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
