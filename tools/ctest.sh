#!/usr/bin/env bash
# ctest over one build directory, for the test command (README, .ci/run) and tools/sanitize.sh:
#   tools/ctest.sh DIR [ctest arguments]
# When tests fail it ends, after ctest's own summary, with what each failed test printed and, last,
# a line per failed test with the first lines that say why: a CI report often keeps only the end
# of a log, where ctest puts its list of skipped tests.
set -uo pipefail
dir=$1
shift
ctest --test-dir "$dir" --output-on-failure -j2 "$@" && exit 0
status=$?
temporary=$dir/Testing/Temporary
[ -f "$temporary/LastTestsFailed.log" ] || exit $status
# LastTest.log: a test's output runs from "Output:" and a dashed line to "<end of output>".
output() {
  awk -v name="$1" '$2 == "Testing:" && $3 == name { on = 1; next }
                   on && /^<end of output>$/ { exit }
                   on && seen { print }
                   on && /^-+$/ { seen = 1 }' "$temporary/LastTest.log"
}
names=$(cut -d: -f2- "$temporary/LastTestsFailed.log")
for name in $names; do
  echo "==== what $name printed"
  output "$name"
done
echo "==== why (the first lines of each failed test's output that say FAIL, Failure or error)"
for name in $names; do
  output "$name" | grep -m 3 -E 'FAIL|Failure|[Ee]rror' | cut -c1-300 | sed "s|^|$name: |"
done
exit $status
