#!/bin/sh
# kill-during-save.sh CKPT OLD NEW TRIES COMMAND...: TRIES times, puts OLD at CKPT, starts
# COMMAND (which writes CKPT, as NEW when it completes) and kills it with SIGKILL after
# 0, 10, 20, ... ms, so the kills land all along the run, its save included. After each kill
# CKPT must be OLD or NEW byte for byte: never missing, never torn. Then COMMAND runs once
# whole, and no temporary file of CKPT may be left (a save's temporary has no name until its
# rename, and a save removes what killed ones left).
ckpt=$1 old=$2 new=$3 tries=$4
shift 4
kept=0 replaced=0 i=0
while [ "$i" -lt "$tries" ]; do
  cp "$old" "$ckpt"
  "$@" > /dev/null 2>&1 &
  pid=$!
  sleep "$(awk "BEGIN { print $i * 0.01 }")"
  kill -s KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if cmp -s "$ckpt" "$old"; then
    kept=$((kept + 1))
  elif cmp -s "$ckpt" "$new"; then
    replaced=$((replaced + 1))
  else
    echo "kill $i after ${i}0 ms: $ckpt is neither the old nor the new checkpoint"
    exit 1
  fi
  i=$((i + 1))
done
"$@" > /dev/null 2>&1 || { echo "the uninterrupted run failed"; exit 1; }
for f in "$ckpt".tmp-*; do
  [ -e "$f" ] && { echo "a temporary file is left: $f"; exit 1; }
done
echo "every kill left a whole checkpoint ($kept old, $replaced new) and no temporary file"
