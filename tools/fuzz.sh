#!/usr/bin/env bash
# tools/fuzz.sh TARGET SECONDS: runs one fuzz target (fuzz/TARGET.cc: ir_text, opt, safetensors,
# config, tokenizer, bundle_args) under libFuzzer for SECONDS seconds, built with clang-19 and
# AddressSanitizer + UndefinedBehaviorSanitizer in build-san/ (tools/sanitize.sh's build;
# KILN_FUZZ_BUILD names another). The corpus (build-san/corpus/TARGET) starts from real inputs:
# `kiln dump` of every model at every stage and the lit tests' IR (IR targets), a checkpoint `kiln
# train` saved (safetensors), the seeds in fuzz/seeds (for tokenizer: a tokenizer.json and a text),
# and every input that once broke the target (fuzz/regressions/TARGET); the IR targets get a
# dictionary of the IR's keywords and op names.
# A crash leaves its input in build-san/crashes/TARGET/ and exits non-zero: fix the bug, then copy
# the input into fuzz/regressions/TARGET/ so the suite replays it (test fuzz_replay_TARGET).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: tools/fuzz.sh TARGET SECONDS  (TARGET: ir_text, opt, safetensors, config, tokenizer, bundle_args)" >&2
  exit 2
fi
target=$1 seconds=$2
case "$target" in ir_text | opt | safetensors | config | tokenizer | bundle_args) ;; *)
  echo "tools/fuzz.sh: unknown target '$target' (expected ir_text, opt, safetensors, config, tokenizer or bundle_args)" >&2
  exit 2 ;;
esac
build=${KILN_FUZZ_BUILD:-build-san}
bash tools/deps.sh --fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then # as tools/sanitize.sh configures it
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
    -DCMAKE_CXX_COMPILER=clang++-19 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DKILN_FUZZ=ON -DKILN_SANITIZE=address,undefined >/dev/null
fi
cmake --build "$build" -j2 --target "kiln_fuzz_$target" kiln

corpus=$build/corpus/$target crashes=$build/crashes/$target
mkdir -p "$corpus" "$crashes"
kiln=$build/kiln
tiny=(--set d_model=16 --set n_heads=2 --set d_ff=16)
args=()
case "$target" in
ir_text | opt)
  for model in gpt bert transformer; do
    depth=(--set n_layers=1 --set seq_len=8)
    [ "$model" = transformer ] &&
      depth=(--set n_encoder_layers=1 --set n_decoder_layers=1 --set src_len=6 --set tgt_len=7)
    for stage in raw optimized train; do
      [ -s "$corpus/dump_${model}_$stage.kir" ] || "$kiln" dump "$model" "${tiny[@]}" \
        "${depth[@]}" --stage "$stage" > "$corpus/dump_${model}_$stage.kir"
    done
  done
  find tests/lit -name '*.kir' -exec cp -n {} "$corpus/" \;
  dict=$build/ir.dict
  {
    for w in graph input param state output init normal uniform zeros ones domain range mem \
      arena io weights constants scratch offset bytes view loc body loss update f32 f64 bf16 i64 \
      bool; do
      echo "\"$w\""
    done
    "$kiln" ops | awk '/^[a-z_]+ / { print "\"" $1 "\"" }'
  } > "$dict"
  args+=("-dict=$dict")
  ;;
safetensors)
  [ -s "$corpus/checkpoint.safetensors" ] ||
    "$kiln" train gpt --set n_layers=1 --set d_model=8 --set n_heads=2 --set d_ff=8 \
      --set seq_len=4 --set batch=1 --steps 1 --save "$corpus/checkpoint.safetensors" >/dev/null
  cp -n fuzz/seeds/safetensors/* "$corpus/"
  ;;
config | tokenizer | bundle_args)
  cp -n "fuzz/seeds/$target"/* "$corpus/"
  ;;
esac
dirs=("$corpus")
[ -d "fuzz/regressions/$target" ] && dirs+=("fuzz/regressions/$target")
# New inputs go to the first directory (the build's corpus); the tree's regressions are read only.
"$build/kiln_fuzz_$target" "${dirs[@]}" "${args[@]}" -max_total_time="$seconds" -timeout=20 \
  -rss_limit_mb=4096 -artifact_prefix="$crashes/" -print_final_stats=1
