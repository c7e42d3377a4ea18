#!/usr/bin/python3
"""kiln's GEMM beside OpenBLAS as Debian ships it and with its AVX-512 kernels, interleaved.

    /usr/bin/python3 bench/gemm_compare.py [--bench build/kiln_gemm_bench] [--rounds 5]

OpenBLAS picks its kernels when it is loaded (OPENBLAS_CORETYPE), so each configuration is its
own process of kiln_gemm_bench. A shared VM's speed drifts by tens of percent within minutes, so
one long run per configuration would compare different machines: each round runs kiln, then
OpenBLAS as shipped, then OpenBLAS with OPENBLAS_CORETYPE=SkylakeX, briefly, and the ratios are
taken within a round; the table gives medians over the rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CONFIGS = [("kiln", "gemm/kiln/", None), ("OpenBLAS", "gemm/openblas/", None),
           ("SkylakeX", "gemm/openblas/", "SkylakeX")]


def run(bench, prefix, coretype):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([bench, f"--benchmark_filter=^{prefix}", "--benchmark_format=json",
                          "--benchmark_min_time=0.5"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return {b["name"][len(prefix):].removesuffix("/real_time"): b["GFLOP/s"] / 1e9
            for b in json.loads(out)["benchmarks"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "kiln_gemm_bench"))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"gemm_compare: no benchmark at {args.bench} (build kiln_gemm_bench)")
    rounds = [{name: run(args.bench, prefix, ct) for name, prefix, ct in CONFIGS}
              for _ in range(args.rounds)]
    if not rounds[0]["OpenBLAS"]:
        sys.exit("gemm_compare: kiln_gemm_bench was built without OpenBLAS "
                 "(bash tools/deps.sh --bench, then configure again)")
    med = lambda f: statistics.median(f(r) for r in rounds)
    print(f"GFLOP/s on 2 threads, medians of {args.rounds} interleaved rounds "
          "(ratios taken within a round)")
    print(f"{'shape (batch x M x K x N)':<28}{'kiln':>8}{'OpenBLAS':>10}{'SkylakeX':>10}"
          f"{'/shipped':>10}{'/SkylakeX':>11}")
    for shape in rounds[0]["kiln"]:
        g = {name: med(lambda r: r[name][shape]) for name, _, _ in CONFIGS}
        print(f"{shape:<28}{g['kiln']:>8.1f}{g['OpenBLAS']:>10.1f}{g['SkylakeX']:>10.1f}"
              f"{med(lambda r: r['kiln'][shape] / r['OpenBLAS'][shape]):>9.2f}x"
              f"{med(lambda r: r['kiln'][shape] / r['SkylakeX'][shape]):>10.2f}x")


if __name__ == "__main__":
    main()
