#!/bin/sh
# interrupt-compile.sh DIR EXE TRIES COMMAND...: TRIES times, starts COMMAND (a `kiln compile -o DIR
# --exe EXE` over an existing bundle and executable) and sends it SIGINT after 0, 0.1, 0.2, ... s,
# so the signal lands in code generation, staging and the link. After each, DIR and EXE's
# directory must hold no temporary file, and the bundle and executable must be the old ones or
# (if the signal came after the commit) whole new ones: the executable still runs.
dir=$1 exe=$2 tries=$3
shift 3
i=0
while [ "$i" -lt "$tries" ]; do
  "$@" > /dev/null 2>&1 &
  pid=$!
  sleep "$(awk "BEGIN { print $i * 0.1 }")"
  kill -s INT "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  for f in "$dir"/*.tmp-* "$(dirname "$exe")"/*.tmp-*; do
    [ -e "$f" ] && { echo "try $i: a temporary file is left: $f"; exit 1; }
  done
  "$exe" info > /dev/null || { echo "try $i: the executable does not run"; exit 1; }
  i=$((i + 1))
done
echo "no interrupt left a temporary file ($tries tries)"
