#!/usr/bin/env bash
# Data-parallel training under MPI (issue 40), as a user runs it: mpirun -np 2 kiln train.
#   run.sh KILN
# Checks, on the highway and llvm backends: 2 ranks x batch B train as 1 process x batch 2B (the
# losses of 20 steps, with dropout too, and the validation losses within 1e-5 relative, the weights
# within 1e-5: not
# bit for bit, since the ranks sum their halves of each gradient apart and add the two, where one
# process sums all rows in one order); two runs of the same job write the same checkpoint bytes,
# with the reductions in the background or not, the gradients in buckets or each on its own, the
# optimizer sharded (ZeRO-1) or not; a standalone executable compiled for 2 ranks, sharded or not,
# writes kiln train's bytes (and refuses 1 or 3 ranks, or ranks that differ; resumes as kiln train
# does; a killed rank ends its job); 2 ranks' checkpoint resumes in one process and continues the
# run, and one process's on 2 ranks, sharded or not; SIGUSR1 to mpirun stops every rank after a step
# and rank 0 saves, and SIGINT does so for a small model (mpirun kills the ranks a second after its
# SIGTERM; rank 0 says so); ranks started with different settings or checkpoints are refused; the
# reference backend says it runs one process; a rank killed mid-run ends the job, non-zero, within
# the bound, its last rolling checkpoint intact. Every mpirun is bounded by `timeout` (a hang fails
# the test instead of stalling CI). Open MPI's session files and shared-memory segments go to the
# test's own directory, so that the killed jobs leave nothing in /tmp or /dev/shm. A failure names
# the line and shows what was printed.
set -euo pipefail
kiln=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null || { echo "skip: no mpirun (tools/deps.sh installs Open MPI)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND"; show' ERR
cd "$work"
export TMPDIR=$work OMPI_MCA_btl_vader_backing_directory=$work
# The ends of what the runs printed, for a failure's message.
show() { for f in *.out; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f" | cut -c1-400; }; done; }

mpi() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }
model=(gpt --set n_layers=2 --set d_model=64 --set n_heads=2 --set d_ff=128 --set seq_len=32)
fail() { echo "FAIL: $*"; show; exit 1; }

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
  # The validation losses: the same rows of held-out text whatever the ranks (they were drawn a
  # rank's batch at a time, so 2 ranks evaluated other rows than one process: 4.6635 against
  # 4.6610 after 20 steps).
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 4 --backend $backend \
      --data "$here/../../README.md" --eval-every 2 --log val-two.jsonl > /dev/null
  "$kiln" train "${model[@]}" --set batch=8 --steps 4 --backend $backend \
      --data "$here/../../README.md" --eval-every 2 --log val-one.jsonl > /dev/null
  python3 "$here/compare.py" losses val-two.jsonl val-one.jsonl 1e-5 ||
    fail "$backend: validation losses differ"
  # The reductions in the background (a thread of their own, beside the backward; auto keeps
  # them off on 2 cores) reduce the same bytes in the same order: the same checkpoint.
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 20 --backend $backend --overlap on \
      --save overlap.safetensors > /dev/null
  cmp two.safetensors overlap.safetensors || fail "$backend: --overlap on changed the run"
  # The gradients in buckets of 50 KiB (concat, one reduction, slices) instead of each on its own
  # (--bucket-mb auto on one machine): on 2 ranks each element's mean is (a + b) / 2 either way,
  # the same bits.
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 20 --backend $backend --bucket-mb 0.05 \
      --save buckets.safetensors > /dev/null
  cmp two.safetensors buckets.safetensors || fail "$backend: buckets changed the run"
  # The sharded optimizer (ZeRO-1): each rank updates its half of the weights with its half of the
  # moments, from the same mean gradients (a reduce-scatter: (a + b) / 2 again), and rank 0
  # gathers the moments into each parameter's whole: the same checkpoint bytes. A rolling
  # checkpoint too takes every rank.
  mpi "$kiln" train "${model[@]}" --set batch=4 --steps 20 --backend $backend --shard-optimizer \
      --save sharded.safetensors --save-every 10 > sharded.out
  cmp two.safetensors sharded.safetensors || fail "$backend: --shard-optimizer changed the run"
  [ -f sharded.step10.safetensors ] || fail "$backend: no rolling checkpoint from the sharded run"
  # Dropout (elementwise and in fused attention) draws one process's masks: each rank numbers its
  # elements from its first row of the global batch (each rank drew the same mask over its own
  # rows: losses 1.5e-3 apart, relative).
  mpi "$kiln" train "${model[@]}" --set batch=4 --set dropout=0.2 --steps 10 --backend $backend \
      --log drop-two.jsonl > /dev/null
  "$kiln" train "${model[@]}" --set batch=8 --set dropout=0.2 --steps 10 --backend $backend \
      --log drop-one.jsonl > /dev/null
  python3 "$here/compare.py" losses drop-two.jsonl drop-one.jsonl 1e-5 ||
    fail "$backend: with dropout, 2 ranks' losses differ from one process's"
  echo "ok: $backend: 2 ranks x 4 = 1 process x 8, with dropout too; the same job twice," \
    "overlapped or not, in buckets or not, sharded or not, the same bytes"
done

# A standalone executable compiled for 2 ranks trains as kiln train does under mpirun (the same
# checkpoint bytes as the llvm backend's), and refuses to start on its own or on 3 ranks.
text=$(dirname "$here")/../README.md
"$kiln" compile "${model[@]}" --set batch=4 --train --ranks 2 -o bundle --exe ./dp > /dev/null
mpi ./dp train --data "$text" --steps 10 --save exe.safetensors > exe.out
mpi "$kiln" train "${model[@]}" --set batch=4 --data "$text" --steps 10 --backend llvm \
    --save llvm.safetensors > llvm.out
cmp exe.safetensors llvm.safetensors || fail "the executable and kiln train differ"
# Its eval scores each rank's rows of train's validation batches and averages them: the
# validation loss train printed for those weights.
mpi ./dp train --data "$text" --steps 2 --eval-every 2 --save dpe.safetensors > dpe.out
./dp eval --weights dpe.safetensors --data "$text" > dpe-eval.out
[ "$(grep -o 'validation loss [0-9.]*' dpe.out | cut -d' ' -f3)" = \
  "$(grep -o '^loss [0-9.]*' dpe-eval.out | cut -d' ' -f2)" ] ||
  fail "the executable's eval is not train's validation loss: $(cat dpe.out dpe-eval.out)"
# Under mpirun it refuses (each rank printed the same loss).
if mpi ./dp eval --weights dpe.safetensors --data "$text" > dpe-mpi.out 2>&1; then
  fail "the executable's eval ran on 2 ranks"
fi
grep -q "eval runs as one process, not on ranks: start it without mpirun" dpe-mpi.out ||
  fail "the executable's eval under mpirun: no clear error: $(cat dpe-mpi.out)"
# So do kiln's commands other than train and bench (two kiln compile -o DIR wrote one directory).
if mpi "$kiln" compile "${model[@]}" -o twice > compile-mpi.out 2>&1; then
  fail "kiln compile ran on 2 ranks"
fi
grep -q "rank [01] of 2: compile runs as one process, not on ranks" compile-mpi.out ||
  fail "kiln compile under mpirun: no clear error: $(cat compile-mpi.out)"
[ ! -e twice ] || fail "kiln compile under mpirun wrote twice/"
# kiln bench --train runs on ranks, which must agree (a rank of fewer steps left the other
# waiting in a reduction; another vocab passed MPI other counts: a heap corruption), and kiln
# bench without --train refuses them (each rank printed the same report).
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 "$kiln" bench "${model[@]}" --train \
    --steps 2 : -np 1 "$kiln" bench "${model[@]}" --train --steps 3 > bench-steps.out 2>&1; then
  fail "kiln bench --train ran ranks of other step counts"
fi
grep -q "the 2 ranks differ in their --warmup or --steps" bench-steps.out ||
  fail "kiln bench --train, ranks of other steps: $(cat bench-steps.out)"
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 "$kiln" bench "${model[@]}" --train \
    --steps 2 : -np 1 "$kiln" bench "${model[@]}" --set vocab=128 --train --steps 2 \
    > bench-model.out 2>&1; then
  fail "kiln bench --train ran ranks of other models"
fi
grep -q "the 2 ranks differ in their program" bench-model.out ||
  fail "kiln bench --train, ranks of other models: $(cat bench-model.out)"
if mpi "$kiln" bench "${model[@]}" --steps 1 > bench-forward.out 2>&1; then
  fail "kiln bench without --train ran on 2 ranks"
fi
grep -q "kiln bench without --train runs as one process, not on ranks" bench-forward.out ||
  fail "kiln bench without --train under mpirun: $(cat bench-forward.out)"
"$kiln" compile "${model[@]}" --set batch=4 --train --ranks 2 --shard-optimizer -o bundle \
    --exe ./dps > /dev/null
mpi ./dps train --data "$text" --steps 10 --save exes.safetensors > exes.out
cmp exes.safetensors llvm.safetensors || fail "the sharded executable and kiln train differ"
if ./dp train --data "$text" --steps 1 > alone.out 2>&1; then fail "the executable trained alone"; fi
grep -q "start it as mpirun -np 2" alone.out || fail "alone: $(cat alone.out)"
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 ./dp train --data "$text" \
    --steps 1 > three.out 2>&1; then fail "the executable trained on 3 ranks"; fi
grep -q "mpirun started 3 ranks, but this executable trains on 2" three.out ||
  fail "3 ranks: $(cat three.out)"
# It resumes on its ranks as kiln train does, refuses ranks started with different settings, and
# a rank of it killed mid-run ends the job, its last rolling checkpoint whole.
mpi ./dp train --data "$text" --steps 5 --load exe.safetensors --save exe2.safetensors > /dev/null
mpi "$kiln" train "${model[@]}" --set batch=4 --data "$text" --steps 5 --backend llvm \
    --load llvm.safetensors --save llvm2.safetensors > /dev/null
cmp exe2.safetensors llvm2.safetensors || fail "the executable's resume and kiln train's differ"
if mpi sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=--seed=3; exec "$0" "$@" $s' \
    ./dp train --data "$text" --steps 3 > exe-differ.out 2>&1; then
  fail "the executable's ranks with different seeds trained"
fi
grep -q "the 2 ranks differ in their seed:" exe-differ.out ||
  fail "the executable: no clear error for ranks that differ: $(cat exe-differ.out)"
# Ranks running executables compiled otherwise (another learning rate: the same tensors) are
# refused; each applied its own rate to the mean gradient, and their weights drifted apart.
"$kiln" compile "${model[@]}" --set batch=4 --train --ranks 2 --lr 0.05 -o bundle-lr \
    --exe ./dp-lr > /dev/null
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 ./dp train --data "$text" \
    --steps 2 : -np 1 ./dp-lr train --data "$text" --steps 2 > exe-lr.out 2>&1; then
  fail "executables compiled with other learning rates trained together"
fi
grep -q "the 2 ranks differ in their program" exe-lr.out ||
  fail "the executables of other rates: no clear error: $(cat exe-lr.out)"
if mpi sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" "$@" & p=$!;
              for i in $(seq 600); do ls exe-killed.step*.safetensors >/dev/null 2>&1 && break;
              sleep 0.1; done; kill -KILL $p; wait $p; else exec "$0" "$@"; fi' \
    ./dp train --data "$text" --steps 1000000 --save-every 20 --save exe-killed.safetensors \
    > exe-killed.out 2>&1; then
  fail "the executable's job with a killed rank exited 0"
fi
last=$(ls exe-killed.step*.safetensors 2>/dev/null | sort -V | tail -1)
[ -n "$last" ] || fail "the executable wrote no rolling checkpoint before the kill"
"$kiln" train "${model[@]}" --set batch=8 --steps 1 --load "$last" > /dev/null ||
  fail "the executable's last checkpoint ($last) does not load"
echo "ok: the standalone executable on 2 ranks, sharded or not, = kiln train, resumed too; alone," \
  "on 3 ranks or with ranks that differ it refuses; a killed rank ends its job"

# A checkpoint of 2 ranks x 4 resumes in 1 process x 8 (the same global batch) and continues the
# run: 10 + 10 steps as 20 uninterrupted, within the same bounds.
mpi "$kiln" train "${model[@]}" --set batch=4 --steps 10 --save half.safetensors > /dev/null
"$kiln" train "${model[@]}" --set batch=8 --steps 10 --load half.safetensors \
    --log resumed.jsonl --save resumed.safetensors > /dev/null
"$kiln" train "${model[@]}" --set batch=8 --steps 20 --log whole.jsonl \
    --save whole.safetensors > /dev/null
tail -n 10 whole.jsonl > whole-tail.jsonl
python3 "$here/compare.py" losses resumed.jsonl whole-tail.jsonl 1e-5 || fail "resumed losses"
python3 "$here/compare.py" weights resumed.safetensors whole.safetensors 1e-5 ||
  fail "resumed weights"
# And the other way: one process's checkpoint (batch 8) resumes on 2 ranks x 4.
"$kiln" train "${model[@]}" --set batch=8 --steps 10 --save first.safetensors > /dev/null
mpi "$kiln" train "${model[@]}" --set batch=4 --steps 10 --load first.safetensors \
    --log onward.jsonl --save onward.safetensors > /dev/null
python3 "$here/compare.py" losses onward.jsonl whole-tail.jsonl 1e-5 || fail "onward losses"
python3 "$here/compare.py" weights onward.safetensors whole.safetensors 1e-5 ||
  fail "onward weights"
# Sharded, each rank takes its part of the checkpoint's moments: the same run on.
mpi "$kiln" train "${model[@]}" --set batch=4 --steps 10 --load first.safetensors \
    --shard-optimizer --save onward-sharded.safetensors > /dev/null
cmp onward.safetensors onward-sharded.safetensors || fail "a sharded resume differs"
echo "ok: 2 ranks' checkpoint resumes in one process, and one process's on 2 ranks, sharded or not"

# SIGUSR1 to mpirun (it passes the signal on, and nothing else): the ranks stop after the same
# step and rank 0 saves, with no deadline, and the ranks end together (rank 0's --plot and its
# "saved" line were cut short when rank 1 exited first and mpirun ended the job). SIGINT: mpirun sends the ranks SIGTERM T seconds later
# and SIGKILL T seconds after that (T = odls_base_sigkill_timeout; 1 by default, 5 here so that a
# loaded CI machine still fits this model's step and save in it); what the ranks print once
# mpirun is ending the job may not reach its output, so only the checkpoint is checked.
for sig in USR1 INT; do
  rm -f $sig.safetensors $sig.png
  plot=(); [ $sig = INT ] || plot=(--plot $sig.png)
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 --mca odls_base_sigkill_timeout 5 \
      "$kiln" train "${model[@]}" "${plot[@]}" \
      --set batch=4 --steps 1000000 --log-every 1000000 --save $sig.safetensors > $sig.out 2>&1 &
  job=$!
  # Once training has begun (its first step logged; before it, compiling, a signal kills outright).
  for _ in $(seq 600); do grep -q "step  *1 " $sig.out 2>/dev/null && break; sleep 0.1; done
  pkill -$sig -P $job mpirun # (mpirun, not timeout, which would not pass SIGUSR1 on)
  if wait $job; then fail "the job stopped by SIG$sig exited 0"; fi
  [ $sig = INT ] || grep -q "interrupted by SIGUSR1 after .* steps; saved parameters" $sig.out ||
    fail "SIG$sig: rank 0 did not say it saved"
  [ $sig = INT ] || [ -s $sig.png ] || fail "SIG$sig: rank 0 did not draw its --plot"
  "$kiln" train "${model[@]}" --set batch=8 --steps 1 --load $sig.safetensors > resumed.out ||
    fail "the checkpoint saved on SIG$sig does not load"
done
echo "ok: SIGUSR1 or SIGINT to mpirun saves a checkpoint that loads"

# Ranks started with different settings: refused before the first step, by every rank.
if mpi sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=--seed=3; exec "$0" "$@" $s' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 3 > differ.out 2>&1; then
  fail "ranks with different seeds trained"
fi
grep -q "the 2 ranks differ in their seed:" differ.out ||
  fail "no clear error for ranks that differ: $(cat differ.out)"
# Validation batches (each validation meets every rank: a validation loss of 8 batches and 3
# averaged, or a collective that one rank never reaches).
if mpi sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=--eval-batches=3; exec "$0" "$@" $s' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 3 --eval-every 2 > differ-eval.out 2>&1; then
  fail "ranks with different --eval-batches trained"
fi
grep -q "the 2 ranks differ in their --eval-every or --eval-batches:" differ-eval.out ||
  fail "no clear error for ranks with other validation batches: $(cat differ-eval.out)"
# --plot (rank 0 draws it: rank 1's picture was dropped without a word).
if mpi sh -c 'p=a.png; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && p=b.png; exec "$0" "$@" --plot "$p"' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 2 > differ-plot.out 2>&1; then
  fail "ranks with different --plot trained"
fi
grep -q "the 2 ranks differ in their --plot:" differ-plot.out ||
  fail "no clear error for ranks with other --plot: $(cat differ-plot.out)"
# Texts that differ only in the held-out tail: the validation loss mixed the two texts' losses.
python3 -c "import sys; t = open(sys.argv[1], 'rb').read(); c = len(t) * 19 // 20
open('tail.txt', 'wb').write(t[:c] + b'x' * (len(t) - c))" "$text"
if mpi sh -c 'd="$0"; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && d=tail.txt; exec "$@" --data "$d"' \
    "$text" "$kiln" train "${model[@]}" --set batch=4 --steps 2 --eval-every 2 > differ-val.out 2>&1; then
  fail "ranks with different held-out texts trained"
fi
grep -q "the 2 ranks differ in their validation text (the part" differ-val.out ||
  fail "no clear error for ranks with other held-out texts: $(cat differ-val.out)"
# Ranks that resume different checkpoints of the same model, after as many steps: refused (they
# trained as one job, each its own weights, the losses averaged, rank 0's saved).
"$kiln" train "${model[@]}" --set batch=4 --steps 2 --save ck-a.safetensors > /dev/null
"$kiln" train "${model[@]}" --set batch=4 --steps 2 --lr 0.005 --save ck-b.safetensors > /dev/null
if mpi sh -c 'c=ck-a.safetensors; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && c=ck-b.safetensors;
              exec "$@" --load "$c"' sh "$kiln" train --set batch=2 --steps 2 \
    --save ck-ab.safetensors > differ-ck.out 2>&1; then
  fail "ranks resuming different checkpoints trained"
fi
grep -q "the 2 ranks differ in their weights" differ-ck.out ||
  fail "no clear error for ranks with different checkpoints: $(cat differ-ck.out)"
[ ! -e ck-ab.safetensors ] || fail "ranks with different checkpoints saved"
# The same weights with other optimizer state (one moment changed), sharded or not: refused too
# (the ranks would update alike weights by different moments, and drift apart).
python3 - ck-a.safetensors ck-m.safetensors <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
header = json.loads(b[8:8 + n])
start = 8 + n + header["opt.exp_avg.tok_embed.weight"]["data_offsets"][0]
b[start:start + 4] = struct.pack("<f", struct.unpack("<f", b[start:start + 4])[0] + 0.5)
open(sys.argv[2], "wb").write(b)
PY
for shard in "" --shard-optimizer; do
  if mpi sh -c 'c=ck-a.safetensors; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && c=ck-m.safetensors;
                exec "$@" --load "$c"' sh "$kiln" train --set batch=2 --steps 2 $shard \
      --save ck-am.safetensors > differ-m.out 2>&1; then
    fail "ranks resuming different optimizer state trained ($shard)"
  fi
  grep -q "the 2 ranks differ in their weights or optimizer state" differ-m.out ||
    fail "no clear error for ranks with different moments ($shard): $(cat differ-m.out)"
  [ ! -e ck-am.safetensors ] || fail "ranks with different moments saved ($shard)"
done
echo "ok: ranks that differ are refused"

# One rank that fails before the first step (a file missing on its machine) ends the job with its
# error, where the other waited in a collective for it and the job hung.
if mpi sh -c 'd=$1; shift; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && d=/nonexistent; exec "$@" --data "$d"' \
    sh "$text" "$kiln" train "${model[@]}" --set batch=4 --steps 3 > one-fails.out 2>&1; then
  fail "a job whose rank 1 had no data trained"
fi
grep -q "/nonexistent: cannot open" one-fails.out ||
  fail "a rank that failed alone: no error, or a hang: $(cat one-fails.out)"
# Its error names it (Open MPI's own banner, which did, was often lost).
grep -q "error: rank 1 of 2: .*/nonexistent: cannot open" one-fails.out ||
  fail "a rank that failed alone: its error does not name it: $(cat one-fails.out)"
echo "ok: a rank that fails alone ends the job with its error"

# The reference interpreter runs one process: it says so instead of training two models.
if mpi "$kiln" train "${model[@]}" --set batch=4 --steps 3 --backend reference > ref.out 2>&1; then
  fail "the reference backend trained on 2 ranks"
fi
# (Refused by the flag before it starts; the collective's node said it, naming "node #48".)
grep -q "rank [01] of 2: --backend reference: it runs on the reference backend, which is one process" \
  ref.out || fail "reference: $(cat ref.out)"
echo "ok: the reference backend refuses 2 ranks"

# bf16 products on f32 FMAs (KILN_BF16_INSTRUCTIONS=none, as on a CPU without bf16 instructions):
# the job says so once, from rank 0 (each rank said it).
KILN_BF16_INSTRUCTIONS=none mpi -x KILN_BF16_INSTRUCTIONS "$kiln" train "${model[@]}" \
    --set batch=4 --steps 2 --precision bf16 > fallback.out 2>&1
notes=$(grep -c "bf16 products run on f32 FMAs" fallback.out || true)
[ "$notes" = 1 ] || fail "the bf16 fallback note is said $notes times"
echo "ok: the bf16 fallback note is said once"

# A rank killed (SIGKILL) mid-run, once rank 0 has written a rolling checkpoint: mpirun ends the
# job non-zero within 60 s of the kill, and that checkpoint is whole (it trains on from it).
if mpi sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" "$@" & p=$!;
              for i in $(seq 600); do ls killed.step*.safetensors >/dev/null 2>&1 && break;
              sleep 0.1; done; date +%s > killed.at; kill -KILL $p; wait $p;
              else exec "$0" "$@"; fi' \
    "$kiln" train "${model[@]}" --set batch=4 --steps 1000000 --save-every 20 --log-every 1000 \
    --save killed.safetensors > killed.out 2>&1; then
  fail "the job with a killed rank exited 0"
fi
took=$(($(date +%s) - $(cat killed.at)))
[ "$took" -le 60 ] || fail "the job with a killed rank took ${took} s to end after the kill"
last=$(ls killed.step*.safetensors 2>/dev/null | sort -V | tail -1)
[ -n "$last" ] || fail "no rolling checkpoint before the kill: $(tail -5 killed.out)"
"$kiln" train "${model[@]}" --set batch=8 --steps 1 --load "$last" > resumed.out ||
  fail "the last checkpoint ($last) does not load: $(cat resumed.out)"
echo "ok: a killed rank ends the job ${took} s after the kill; $last loads"
