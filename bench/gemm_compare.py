#!/usr/bin/python3
"""kiln's GEMM beside OpenBLAS as Debian ships it and with its AVX-512 kernels, and its bf16
products beside oneDNN's, interleaved.

    /usr/bin/python3 bench/gemm_compare.py [--bench build/kiln_gemm_bench] [--rounds 5]
        [--shapes REGEX] [--min-time 0.3]

OpenBLAS picks its kernels when it is loaded (OPENBLAS_CORETYPE), so each configuration is its
own process of kiln_gemm_bench. A shared VM's speed drifts by tens of percent within minutes, so
one long run per configuration would compare different machines, and so would a round of whole
configurations (a third slower between two of its columns, measured): each round runs, shape by
shape, kiln, then OpenBLAS as shipped (the kernels it picks for this CPU by itself, named in the
table's heading), with its AVX2 kernels (OPENBLAS_CORETYPE=Haswell: what it picked on the machine
the issue measured) and with its AVX-512 kernels (SkylakeX), briefly, one after the other, and the
ratios are taken within a round; the table gives medians over the rounds. A second table sets
kiln's bf16 products (--precision bf16's GEMM: f32 operands rounded while packed), and the same
from operands stored in bf16 (as the activations that only bf16 products read are), beside its
f32 GEMM and oneDNN's bf16 matmul (bf16 operands in plain layouts, f32 result: what PyTorch's
autocast calls), when oneDNN was found.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

CONFIGS = [("kiln", "gemm/kiln/", None), ("OpenBLAS", "gemm/openblas/", None),
           ("Haswell", "gemm/openblas/", "Haswell"), ("SkylakeX", "gemm/openblas/", "SkylakeX"),
           ("kiln bf16", "gemm/kiln_bf16/", None), ("kiln bf16 stored", "gemm/kiln_bf16_stored/", None),
           ("oneDNN bf16", "gemm/onednn_bf16/", None)]


def run(bench, prefix, coretype, shape, min_time):
    """GFLOP/s of one shape, and the benchmark's label (OpenBLAS's: the core it uses)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    out = subprocess.run([bench, f"--benchmark_filter=^{re.escape(prefix + shape)}/",
                          "--benchmark_format=json", f"--benchmark_min_time={min_time}"],
                         check=True, capture_output=True, text=True, env=env).stdout
    first = json.loads(out)["benchmarks"][0]
    return first["GFLOP/s"] / 1e9, first.get("label", "")


def listed(bench):
    """The names kiln_gemm_bench would run, in its order, without their "/real_time" (a library
    it was built without has none)."""
    out = subprocess.run([bench, "--benchmark_list_tests"], check=True, capture_output=True,
                         text=True).stdout.split()
    return [n.removesuffix("/real_time") for n in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                    "kiln_gemm_bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="", help="only the shapes this regular expression finds")
    ap.add_argument("--min-time", type=float, default=0.3,
                    help="seconds each benchmark runs at least (google benchmark's min_time)")
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"gemm_compare: no benchmark at {args.bench} (build kiln_gemm_bench)")
    benchmarks = listed(args.bench)
    shapes = [n[len("gemm/kiln/"):] for n in benchmarks if n.startswith("gemm/kiln/")
              and re.search(args.shapes, n[len("gemm/kiln/"):])]
    if not shapes:
        sys.exit(f"gemm_compare: no shape of {args.bench} matches --shapes {args.shapes!r}")
    if "gemm/openblas/" + shapes[0] not in benchmarks:
        sys.exit("gemm_compare: kiln_gemm_bench was built without OpenBLAS "
                 "(bash tools/deps.sh --bench, then configure again)")
    configs = [c for c in CONFIGS if c[1] + shapes[0] in benchmarks]  # oneDNN's only where found
    labels = {}
    rounds = []
    for _ in range(args.rounds):
        r = {name: {} for name, _, _ in configs}
        for shape in shapes:
            for name, prefix, ct in configs:
                r[name][shape], label = run(args.bench, prefix, ct, shape, args.min_time)
                labels.setdefault(name, label)
        rounds.append(r)
    shipped_core = labels.get("OpenBLAS") or "?"
    med = lambda f: statistics.median(f(r) for r in rounds)
    print(f"GFLOP/s on 2 threads, medians of {args.rounds} rounds, the configurations of each "
          "shape run one after the other (ratios taken within a round)")
    print(f"OpenBLAS as shipped picks its {shipped_core} kernels on this CPU")
    print(f"{'shape (batch x M x K x N)':<26}{'kiln':>7}{'OpenBLAS':>9}{'Haswell':>9}"
          f"{'SkylakeX':>9}{'/shipped':>9}{'/Haswell':>9}{'/SkylakeX':>10}")
    for shape in shapes:
        g = {name: med(lambda r: r[name][shape]) for name in ("kiln", "OpenBLAS", "Haswell",
                                                              "SkylakeX")}
        ratio = lambda name: med(lambda r: r["kiln"][shape] / r[name][shape])
        print(f"{shape:<26}{g['kiln']:>7.1f}{g['OpenBLAS']:>9.1f}{g['Haswell']:>9.1f}"
              f"{g['SkylakeX']:>9.1f}{ratio('OpenBLAS'):>8.2f}x{ratio('Haswell'):>8.2f}x"
              f"{ratio('SkylakeX'):>9.2f}x")
    if "oneDNN bf16" not in rounds[0]:
        print("(no oneDNN: tools/deps.sh --bench installs libdnnl-dev; configure again)")
        return
    print(f"\nbf16 products (f32 sums) beside kiln's f32 and oneDNN's bf16 matmul "
          f"({labels.get('oneDNN bf16') or '?'})")
    print("(bf16: from f32 operands, rounded as packed; stored: from operands stored in bf16, "
          "as oneDNN's)")
    print(f"{'shape (batch x M x K x N)':<26}{'bf16':>7}{'stored':>7}{'f32':>7}{'oneDNN':>8}"
          f"{'bf16/f32':>9}{'bf16/oneDNN':>12}{'stored/oneDNN':>14}")
    names = ("kiln bf16", "kiln bf16 stored", "kiln", "oneDNN bf16")
    for shape in shapes:
        g = {name: med(lambda r: r[name][shape]) for name in names}
        ratio = lambda num, den: med(lambda r: r[num][shape] / r[den][shape])
        print(f"{shape:<26}{g['kiln bf16']:>7.0f}{g['kiln bf16 stored']:>7.0f}{g['kiln']:>7.0f}"
              f"{g['oneDNN bf16']:>8.0f}{ratio('kiln bf16', 'kiln'):>8.2f}x"
              f"{ratio('kiln bf16', 'oneDNN bf16'):>11.2f}x"
              f"{ratio('kiln bf16 stored', 'oneDNN bf16'):>13.2f}x")

if __name__ == "__main__":
    main()
