#!/usr/bin/env bash
# End-to-end parity with PyTorch: for each variant below, `kiln parity-dump` writes a small
# model's weights, a batch and kiln's loss, logits, gradients and one optimizer step, and
# tools/torch_parity.py rebuilds the model in PyTorch and compares (f32, rtol 1e-4, atol 1e-5).
# The variants together cover GPT, BERT and the encoder-decoder; every position scheme, pre/post
# norm, LayerNorm/RMSNorm (default and set norm_eps, BERT's 1e-12), MHA/MQA/GQA, ALiBi with head
# counts that are not powers of two, every activation (in BERT's MLM head too), tied/untied
# embeddings, biases on/off, label smoothing, ignore_index (-100, pad_id, an id in the
# vocabulary), sliding-window attention (GPT's causal, BERT's both sides), T5 (its position
# buckets, exact and logarithmic, past max_distance too; tied and untied heads), and
# SGD/Adam/AdamW; and the compiled graph on highway and llvm, f32 and bf16 products.
# Usage: run_parity.sh KILN_BINARY SOURCE_DIR.  Exit 77 (ctest: skipped) without python3-torch.
set -uo pipefail
kiln=${1:?usage: run_parity.sh KILN_BINARY SOURCE_DIR}
src=${2:?usage: run_parity.sh KILN_BINARY SOURCE_DIR}

# shellcheck source=torch_python.sh
source "$src/tests/parity/torch_python.sh" torch_parity

# Small shapes keep the reference interpreter fast; 2 layers so that a layer sees a layer.
small="--set d_model=32 --set n_heads=4 --set d_ff=64 --set vocab=61 --set max_len=16"
dec="$small --set seq_len=8 --set n_layers=2"
seq2seq="$small --set src_len=7 --set tgt_len=9 --set n_encoder_layers=2 --set n_decoder_layers=2"
bert="$dec --set type_vocab=3"
t5="--set d_model=32 --set n_heads=4 --set d_ff=64 --set vocab=61 --set src_len=7 --set tgt_len=9 --set n_encoder_layers=2 --set n_decoder_layers=2"

# One variant per line: model | its settings | optimizer flags (empty: none).
variants=(
  "gpt|$dec|--optimizer adamw --lr 0.01 --weight-decay 0.1"
  "gpt|$dec --set position=rope --set n_kv_heads=1 --set norm_kind=rmsnorm --set activation=swiglu --set bias=false --set tie_embeddings=false|--optimizer sgd --lr 0.1 --momentum 0.9 --nesterov --weight-decay 0.01"
  "gpt|$dec --set position=alibi --set n_kv_heads=2 --set norm=post --set activation=relu --set label_smoothing=0.1|"
  "gpt|$dec --set position=relative --set relative_k=3 --set activation=gelu --set tie_embeddings=false|--optimizer adam --lr 0.003 --beta1 0.8 --beta2 0.99 --eps 1e-6 --weight-decay 0.01"
  "gpt|$dec --set position=none --set norm_kind=rmsnorm --set ignore_index=5 --set label_smoothing=0.05 --set activation=softplus|"
  "gpt|$dec --set position=sinusoidal --set norm=post --set norm_kind=rmsnorm --set activation=swiglu --set n_kv_heads=2|--optimizer sgd --lr 0.05 --momentum 0.5"
  "gpt|$dec --set position=alibi --set n_heads=6 --set d_model=48 --set n_kv_heads=3|--optimizer adam --lr 0.01"
  "gpt|$dec --set window=3 --set position=rope --set n_kv_heads=2|--optimizer adam --lr 0.01"
  "bert|$bert|--optimizer sgd --lr 0.1"
  "bert|$bert --set norm=pre --set position=relative --set relative_k=2 --set n_kv_heads=2 --set activation=swiglu --set tie_embeddings=false --set label_smoothing=0.2 --set ignore_index=pad_id|--optimizer adamw --lr 0.001"
  "bert|$bert --set position=alibi --set norm_kind=rmsnorm --set activation=gelu_tanh --set bias=false --set n_kv_heads=1|"
  "bert|$bert --set position=rope --set activation=relu|"
  "bert|$bert --set position=sinusoidal --set norm=pre --set n_kv_heads=2|--optimizer adam --lr 0.01"
  "bert|$bert --set position=alibi --set n_heads=12 --set d_model=48 --set activation=gelu_tanh|"
  "bert|$bert --set activation=softplus --set norm=pre --set norm_eps=1e-3 --set tie_embeddings=false|"
  "bert|$bert --set window=2 --set position=alibi --set n_kv_heads=1|"
  "t5|$t5|--optimizer adamw --lr 0.01 --weight-decay 0.1"
  "t5|$t5 --set num_buckets=8 --set max_distance=12 --set src_len=16 --set tgt_len=17 --set tie_embeddings=false --set activation=swiglu --set n_kv_heads=2|"
  "transformer|$seq2seq --set label_smoothing=0.1|--optimizer adam --lr 0.001"
  "transformer|$seq2seq --set norm=pre --set position=rope --set n_kv_heads=1 --set activation=swiglu --set tie_embeddings=false --set norm_kind=rmsnorm --set init=normal|--optimizer adamw --lr 0.01 --weight-decay 0.05"
  "transformer|$seq2seq --set position=learned --set activation=gelu --set ignore_index=-100|--optimizer sgd --lr 0.1 --momentum 0.9"
  "transformer|$seq2seq --set position=relative --set relative_k=4 --set n_kv_heads=2 --set activation=gelu_tanh --set bias=false|"
  "transformer|$seq2seq --set position=alibi --set norm=pre --set tie_embeddings=false --set label_smoothing=0.1|"
  "transformer|$seq2seq --set position=none --set norm_kind=rmsnorm|"
  "transformer|$seq2seq --set position=alibi --set n_heads=12 --set d_model=48 --set norm_kind=rmsnorm --set norm_eps=1e-4|"
  # The graph as kiln train compiles it (fused, lowered) on the fast backends, in f32 and with
  # bf16 products (PyTorch rounding the same products' operands; rtol 2e-2, atol 2e-3), some with
  # the step as kiln train compiles it (its update fused into the products that make gradients;
  # checked with f32's tolerances: torch steps from kiln's own gradients).
  "gpt|$dec|--backend highway --optimizer adamw --lr 0.01"
  "gpt|$dec --set position=rope --set n_kv_heads=2 --set activation=swiglu|--backend llvm --optimizer adam --lr 0.01"
  "bert|$bert --set position=alibi|--backend llvm"
  "transformer|$seq2seq --set activation=gelu|--backend highway"
  "gpt|$dec|--backend highway --precision bf16"
  "gpt|$dec --set position=rope --set norm_kind=rmsnorm|--backend llvm --precision bf16 --optimizer adamw --lr 0.01"
  "bert|$bert|--backend llvm --precision bf16"
  "transformer|$seq2seq --set activation=gelu|--backend highway --precision bf16"
  "gpt|$dec --set position=relative --set relative_k=3 --set tie_embeddings=false|--backend llvm --precision bf16"
  "t5|$t5|--backend llvm --precision bf16"
  "bert|$bert --set position=rope|--precision bf16 --optimizer adam --lr 0.01"
)

# A variant's --set of a key the base sets replaces the base's (kiln refuses a key given twice):
# each key once, in the order keys first appear, at its last value.
merged() {
  awk '{ for (i = 1; i <= NF; i++) if ($i == "--set") { i++; k = $i; sub(/=.*/, "", k);
           if (!(k in v)) order[++n] = k; v[k] = $i } }
       END { for (j = 1; j <= n; j++) printf "--set %s ", v[order[j]] }' <<<"$1"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
dumps=()
for i in "${!variants[@]}"; do
  IFS='|' read -r model sets opt <<<"${variants[$i]}"
  sets=$(merged "$sets")
  dir="$work/v$i"
  # shellcheck disable=SC2086  # settings and flags are word lists
  if ! dump=$("$kiln" parity-dump "$model" $sets $opt --seed "$i" --out "$dir" 2>&1); then
    echo "FAIL variant $i ($model): kiln parity-dump failed:"
    echo "$dump"
    failed=$((failed + 1))
  else
    dumps+=("$dir")
  fi
done
# PyTorch's side of every dump in one process (torch takes a second or more to start).
torch=passed
"$python" "$src/tools/torch_parity.py" "${dumps[@]}" || torch="failed (above)"
echo "torch_parity: ${#variants[@]} variants; kiln parity-dump failed on $failed; PyTorch's check" \
  "of the rest $torch"
[ "$failed" -eq 0 ] && [ "$torch" = passed ]
