#!/bin/sh
# kill-during-rolling-saves.sh DIR WANT TRIES COMMAND...: TRIES times, empties DIR, starts COMMAND
# (a `kiln train --save-every N --save DIR/ck.safetensors`) and kills it with SIGKILL after 0, 10,
# 20, ... ms, so the kills land all along the run, its rolling saves and their removals included.
# After each kill every checkpoint in DIR must be the file of that name in WANT (an uninterrupted
# run's) byte for byte: a checkpoint is whole or absent, never torn.
dir=$1 want=$2 tries=$3
shift 3
i=0 seen=0
while [ "$i" -lt "$tries" ]; do
  rm -rf "$dir" && mkdir -p "$dir"
  "$@" > /dev/null 2>&1 &
  pid=$!
  sleep "$(awk "BEGIN { print $i * 0.01 }")"
  kill -s KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  for f in "$dir"/*.safetensors; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    if ! cmp -s "$f" "$want/$name"; then
      echo "kill $i after ${i}0 ms: $name is not the uninterrupted run's $name"
      exit 1
    fi
    seen=$((seen + 1))
  done
  i=$((i + 1))
done
echo "every kill left whole checkpoints ($seen found)"
