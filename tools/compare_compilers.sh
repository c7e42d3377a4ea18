#!/usr/bin/env bash
# Checks that the IR kiln builds does not depend on the C++ compiler: `kiln dump` of every zoo
# model in a spread of variants, at every stage (raw, optimized, train), from a GCC build and a
# clang build, must be byte-identical (a builder call nested beside another in an argument list
# is evaluated in an unspecified order, so GCC and clang would number the same graph apart).
# Usage: tools/compare_compilers.sh [GCC_KILN [CLANG_KILN]]  (default build/kiln, build-clang/kiln)
# Prints each differing dump's diff head and a count; exits 1 if any dump differs.
# KILN_MASK_LINES=1 masks the source line numbers in loc(...) first: for comparing binaries built
# from different revisions of the source (e.g. one compiler before and after a change).
set -uo pipefail
cd "$(dirname "$0")/.."
gcc_kiln=${1:-build/kiln}
clang_kiln=${2:-build-clang/kiln}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One variant per line: space-separated key=value settings ("" = the model's defaults).
common_variants=(
  ""
  "norm=pre"
  "norm=post"
  "norm_kind=rmsnorm"
  "norm=post norm_kind=rmsnorm"
  "position=learned"
  "position=sinusoidal"
  "position=relative"
  "position=rope"
  "position=alibi"
  "position=none"
  "activation=relu"
  "activation=gelu"
  "activation=gelu_tanh"
  "activation=swiglu"
  "n_kv_heads=1"
  "n_kv_heads=2"
  "n_kv_heads=2 activation=swiglu"
  "tie_embeddings=false"
  "activation=relu tie_embeddings=false"
  "bias=false"
  "bias=false activation=swiglu norm_kind=rmsnorm position=rope"
  "dropout=0.1"
  "dropout=0.1 norm=pre position=relative"
  "loss=true"
  "loss=true label_smoothing=0.1"
  "loss=true label_smoothing=0.1 ignore_index=pad_id"
  "dtype=bf16"
  "dtype=f64"
  "init=xavier"
  "init=normal"
  "norm=pre position=alibi n_kv_heads=1 activation=gelu dropout=0.1 label_smoothing=0.1 loss=true"
)
declare -A depth=(
  [gpt]="n_layers=3 d_model=16 n_heads=2 d_ff=16"
  [bert]="n_layers=3 norm=pre d_model=16 n_heads=2 d_ff=16"
  [transformer]="n_encoder_layers=3 n_decoder_layers=2 d_model=16 n_heads=2 d_ff=16"
  [t5]="n_encoder_layers=3 n_decoder_layers=2 d_model=16 n_heads=2 d_ff=16"
)

models=$("$gcc_kiln" models | awk '/^[a-z]/ {print $1}')
compared=0
differ=0
for model in $models; do
  # The model's keys (`kiln models` lists each as "--set KEY = ..."): a variant setting any other
  # is left out (t5 has no norm or position keys, for one).
  keys=" $("$gcc_kiln" models | awk -v m="$model" '/^[a-z]/ { on = $1 == m } on && $1 == "--set" { print $2 }' | tr '\n' ' ')"
  for variant in "${common_variants[@]}" "${depth[$model]:-}"; do
    args=()
    known=1
    for kv in $variant; do
      args+=(--set "$kv")
      [[ $keys == *" ${kv%%=*} "* ]] || known=0
    done
    [[ $known == 1 ]] || continue
    for stage in raw optimized train; do
      # The two dumps side by side (the sanitized clang build's is the slow one).
      "$gcc_kiln" dump "$model" "${args[@]}" --stage="$stage" >"$out/gcc" 2>&1 &
      gcc_pid=$!
      "$clang_kiln" dump "$model" "${args[@]}" --stage="$stage" >"$out/clang" 2>&1
      clang_rc=$?
      wait "$gcc_pid"
      gcc_rc=$?
      if [[ ${KILN_MASK_LINES:-0} == 1 ]]; then
        sed -i -E 's/(loc\("[^"]*"):[0-9]+/\1:N/g' "$out/gcc" "$out/clang"
      fi
      compared=$((compared + 1))
      if [[ $gcc_rc != "$clang_rc" ]] || ! cmp -s "$out/gcc" "$out/clang"; then
        differ=$((differ + 1))
        echo "=== $model [$variant] --stage=$stage: differs (exit $gcc_rc vs $clang_rc)"
        diff "$out/gcc" "$out/clang" | head -n "${KILN_DIFF_LINES:-12}"
      elif [[ $gcc_rc != 0 ]]; then
        echo "=== $model [$variant] --stage=$stage: both failed (exit $gcc_rc): $(head -c 200 "$out/gcc")"
      fi
    done
  done
done
echo "$compared dumps compared, $differ differ"
[[ $differ == 0 ]]
