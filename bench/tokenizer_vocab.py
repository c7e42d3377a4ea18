#!/usr/bin/env python3
"""Writes a byte-level BPE tokenizer.json of N tokens (default 128k: Llama 3's vocabulary size),
for timing how kiln loads a real-sized vocabulary (issue 36: loading was quadratic in it).

    bench/tokenizer_vocab.py [N] > big.json
    /usr/bin/time -f '%e s %M KB' ./build/kiln tokenizer encode --tokenizer big.json "some text"

The tokens are made as BPE makes them: the 256 byte tokens, then each merge joins two existing
tokens (drawn from a seeded stream, so the file is the same every time) into one that is not in
the vocabulary yet. Tokens are spelled in GPT-2's byte-to-character map, as tokenizer.json has
them, and the merges are "left right" strings in rank order.
"""
import json
import random
import sys


def byte_chars():
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    chars, extra = {}, 256
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(extra)
            extra += 1
    return chars


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 131072
    chars = byte_chars()
    spell = lambda bs: "".join(chars[b] for b in bs)
    tokens = [bytes([b]) for b in range(256)]
    known = set(tokens)
    merges = []
    rng = random.Random(36)
    while len(tokens) < n:
        # Short pieces, as real vocabularies have: a token and a byte or another token.
        left = tokens[rng.randrange(len(tokens))]
        right = tokens[rng.randrange(256 if rng.random() < 0.5 else len(tokens))]
        joined = left + right
        if joined in known or len(joined) > 16:
            continue
        known.add(joined)
        tokens.append(joined)
        merges.append(spell(left) + " " + spell(right))
    doc = {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": {spell(t): i for i, t in enumerate(tokens)},
                  "merges": merges},
    }
    json.dump(doc, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
