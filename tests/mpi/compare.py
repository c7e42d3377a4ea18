#!/usr/bin/env python3
"""Compares two kiln training runs for tests/mpi/run.sh.

  compare.py losses A.jsonl B.jsonl TOL   each step's loss (and validation loss) within TOL
                                          relative
  compare.py weights A.safetensors B.safetensors TOL
      the parameters (every F32 tensor but the optimizer's opt.*) within TOL as one vector's
      relative L2 distance, ||a - b|| / ||b||: a per-tensor or per-element bound would trip on
      the parameters whose gradient is zero in exact arithmetic (a key projection's bias, which
      softmax cancels), whose values are rounding noise that Adam scales up to the learning rate.
"""
import array
import json
import math
import struct
import sys


def losses(path):
    out = {}
    with open(path) as f:
        for r in map(json.loads, f):
            out[r["step"]] = r["loss"]
            if "val_loss" in r:
                out[f"validation at {r['step']}"] = r["val_loss"]
    return out


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32" or name.startswith("opt."):
            continue
        begin, end = t["data_offsets"]
        a = array.array("f")
        a.frombytes(data[8 + n + begin:8 + n + end])
        out[name] = a
    return out


def main():
    kind, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if kind == "losses":
        x, y = losses(a), losses(b)
        if x.keys() != y.keys():
            sys.exit(f"{a} and {b} log different steps: "
                     f"{sorted(x, key=str)} and {sorted(y, key=str)}")
        worst = max(abs(x[s] - y[s]) / abs(y[s]) for s in y)
        print(f"{len(y)} losses: worst relative difference {worst:.3g} (bound {tol})")
    else:
        x, y = tensors(a), tensors(b)
        if x.keys() != y.keys():
            sys.exit(f"{a} and {b} hold different parameters: {sorted(x.keys() ^ y.keys())}")
        num = sum((p - q) ** 2 for k in y for p, q in zip(x[k], y[k]))
        den = sum(q * q for k in y for q in y[k])
        worst = math.sqrt(num / den)
        print(f"{len(y)} parameters: relative L2 distance {worst:.3g} (bound {tol})")
    sys.exit(0 if worst <= tol else 1)


main()
