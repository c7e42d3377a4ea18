#!/usr/bin/env bash
# Hugging Face checkpoints through kiln: for GPT-2 124M's, TinyLlama-1.1B's, SmolLM-135M's and
# Mistral-7B's configs (scaled down), random weights in the Hugging Face names, layouts and a
# dtype of the three (tests/parity/hf_models.py make), then
#   1. kiln import; kiln parity-dump --load runs a batch; its logits equal an independent
#      PyTorch implementation of the architecture (hf_models.py logits) at rtol 1e-4, atol 1e-5;
#   2. kiln generate --greedy (highway backend, KV cache; model, settings and tokenizer from the
#      checkpoint alone) appends the tokens PyTorch's greedy decoding appends;
#   3. kiln export, then kiln import of the export: the same checkpoint, byte for byte.
# Usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR.  Exit 77 (ctest: skipped) without python3-torch.
set -uo pipefail
kiln=${1:?usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR}
src=${2:?usage: run_hf_parity.sh KILN_BINARY SOURCE_DIR}
models="$src/tests/parity/hf_models.py"

python=
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c 'import torch' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "hf_parity: SKIPPED (no python3 that can import torch; apt-get install python3-torch)"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A byte-level BPE tokenizer of 300 tokens, as the checkpoints' tokenizer.json.
"$kiln" tokenizer train "$src/README.md" --vocab-size 300 -o "$work/tok.json" >/dev/null || exit 1

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

prompt="the model"
for variant in gpt2:f32 gpt2:f16 tinyllama:bf16 smollm:f32 mistral:bf16; do
  arch=${variant%%:*} dtype=${variant##*:}
  hf="$work/$arch-$dtype" ckpt="$work/$arch-$dtype.safetensors"
  echo "== $arch ($dtype on disk)"
  "$python" "$models" make "$arch" "$hf" --dtype "$dtype" --tokenizer "$work/tok.json" ||
    { fail "$variant: make"; continue; }
  "$kiln" import "$hf" -o "$ckpt" || { fail "$variant: import"; continue; }

  # 1. Logits of a batch, against PyTorch.
  "$kiln" parity-dump --load "$ckpt" --set batch=2 --set seq_len=8 --out "$hf.dump" >/dev/null ||
    fail "$variant: parity-dump"
  "$python" "$models" logits "$hf" "$hf.dump" || fail "$variant: logits"

  # 2. Greedy generation, against PyTorch's.
  ids=$("$kiln" tokenizer encode --tokenizer "$work/tok.json" "$prompt") || fail "$variant: encode"
  # shellcheck disable=SC2086 # the ids are words
  want=$("$python" "$models" greedy "$hf" --ids $ids --max-new 10) || fail "$variant: greedy"
  # shellcheck disable=SC2086
  "$kiln" tokenizer decode --tokenizer "$work/tok.json" $want >"$hf.want" || fail "$variant: decode"
  "$kiln" generate --load "$ckpt" --prompt "$prompt" --greedy --max-new 10 >"$hf.got" ||
    fail "$variant: generate"
  "$python" - "$hf.got" "$hf.want" "$prompt" <<'EOF' || fail "$variant: generated tokens"
import sys
got, want = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
expected = b"--- prompt 1\n" + sys.argv[3].encode() + want  # want ends in the newline
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
done

if [ "$failures" -ne 0 ]; then
  echo "hf_parity: $failures failure(s)"
  exit 1
fi
echo "hf_parity: all variants match"
