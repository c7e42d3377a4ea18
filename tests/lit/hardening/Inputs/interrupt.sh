#!/bin/sh
# interrupt.sh SIGNAL LOG COMMAND...: runs COMMAND in the background with its output in LOG,
# waits until it has printed a training step, sends it SIGNAL, waits for it to end and prints
# "exit STATUS" (no timing is assumed: the signal goes out once a step line is there).
sig=$1 log=$2
shift 2
# Empty the log first: the background command truncates it only once it starts, and a step line
# left by an earlier run would otherwise send the signal before kiln handles it (a background
# command of a non-interactive sh starts with SIGINT ignored).
: > "$log"
"$@" > "$log" 2>&1 &
pid=$!
until grep -q "^step" "$log"; do
  kill -0 "$pid" 2>/dev/null || break # it ended (or failed) before a step: report that
  sleep 0.05
done
kill -s "$sig" "$pid" 2>/dev/null
wait "$pid"
echo "exit $?"
