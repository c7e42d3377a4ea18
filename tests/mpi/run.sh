#!/usr/bin/env bash
# Data-parallel training under MPI (issue 40), as a user runs it: mpirun -np 2 kiln train.
#   run.sh KILN
# Checks, on the highway and llvm backends: 2 ranks x batch B train as 1 process x batch 2B (the
# losses of 20 steps within 1e-5 relative, the weights within 1e-5: not bit for bit, since the
# ranks sum their halves of each gradient apart and add the two, where one process sums all rows
# in one order); two runs of the same job write the same checkpoint bytes; ranks started with
# different settings are refused; the reference backend says it runs one process; a rank killed
# mid-run ends the job, non-zero, within the bound, its last rolling checkpoint intact. Every
# mpirun is bounded by `timeout` (a hang fails the test instead of stalling CI).
set -euo pipefail
kiln=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null || { echo "skip: no mpirun (tools/deps.sh installs Open MPI)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

mpi() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }
model=(gpt --set n_layers=2 --set d_model=64 --set n_heads=2 --set d_ff=128 --set seq_len=32)
fail() { echo "FAIL: $*"; exit 1; }

for backend in highway llvm; do
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 20 --backend $backend \
      --log two.jsonl --save two.safetensors > two.out
  "$kiln" train "${model[@]}" --set batch=8 --steps 20 --backend $backend \
      --log one.jsonl --save one.safetensors > one.out
  grep -q "trained 20 steps" two.out || fail "$backend: no summary from rank 0: $(cat two.out)"
  python3 "$here/compare.py" losses two.jsonl one.jsonl 1e-5 || fail "$backend: losses differ"
  python3 "$here/compare.py" weights two.safetensors one.safetensors 1e-5 ||
    fail "$backend: weights differ"
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 20 --backend $backend \
      --save again.safetensors > /dev/null
  cmp two.safetensors again.safetensors || fail "$backend: two runs of one job differ"
  echo "ok: $backend: 2 ranks x 4 = 1 process x 8; the same job twice, the same bytes"
done

# Ranks started with different settings: refused before the first step, by every rank.
if mpi sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=--seed=3; exec "$0" "$@" $s' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 3 > differ.out 2>&1; then
  fail "ranks with different seeds trained"
fi
grep -q "the 2 ranks differ in their model, settings, seed" differ.out ||
  fail "no clear error for ranks that differ: $(cat differ.out)"
echo "ok: ranks that differ are refused"

# The reference interpreter runs one process: it says so instead of training two models.
if mpi "$kiln" train "${model[@]}" --set batch=4 --steps 3 --backend reference > ref.out 2>&1; then
  fail "the reference backend trained on 2 ranks"
fi
grep -q "the reference interpreter is one process" ref.out || fail "reference: $(cat ref.out)"
echo "ok: the reference backend refuses 2 ranks"

# A rank killed (SIGKILL) mid-run: mpirun ends the job non-zero within 60 s, and the rolling
# checkpoint rank 0 wrote before is whole (it trains on from it).
start=$(date +%s)
if mpi sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" "$@" & p=$!; sleep 3; kill -KILL $p;
              wait $p; else exec "$0" "$@"; fi' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 1000000 --save-every 20 --log-every 1000 \
    --save killed.safetensors > killed.out 2>&1; then
  fail "the job with a killed rank exited 0"
fi
took=$(($(date +%s) - start))
[ "$took" -le 60 ] || fail "the job with a killed rank took ${took} s to end"
last=$(ls killed.step*.safetensors 2>/dev/null | sort -V | tail -1)
[ -n "$last" ] || fail "no rolling checkpoint before the kill: $(tail -5 killed.out)"
"$kiln" train "${model[@]}" --set batch=8 --steps 1 --load "$last" > resumed.out ||
  fail "the last checkpoint ($last) does not load: $(cat resumed.out)"
echo "ok: a killed rank ends the job in ${took} s; $last loads"
