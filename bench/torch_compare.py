#!/usr/bin/env python3
"""kiln against PyTorch on the same GPT, back to back in one run: the training step (forward,
cross-entropy, backward, AdamW) and the forward pass, median times, peak RSS and the ratios.

    /usr/bin/python3 bench/torch_compare.py [--kiln build/kiln] [--steps 10] [--rounds 3] [--gpt2]
        [--backends highway,llvm] [--precisions f32,bf16]

The default model is the issue's benchmark GPT: 4 layers, d_model 256, 4 heads, d_ff 1024,
T 128, batch 16, vocab 256, pre-LN, exact GELU, learned positions. --gpt2 is GPT-2 124M in the
llm.c CPU configuration (12 layers, d 768, 12 heads, vocab 50257, T 64, batch 4, GELU tanh).

PyTorch runs in its best f32 setting on this machine: OpenBLAS forced to its AVX-512 kernels
(OPENBLAS_CORETYPE=SkylakeX) on 2 threads, torch.set_num_threads(1), set here before torch is
imported; and in mixed precision, torch.autocast("cpu", dtype=torch.bfloat16) (oneDNN's bf16
kernels) at torch.set_num_threads(1) and (2), the faster of which counts as its bf16 best. kiln
runs each of --backends in each of --precisions (f32, and bf16: --precision bf16). A caller's own OPENBLAS_CORETYPE is overridden, and said so (a machine here came with
OPENBLAS_CORETYPE=Haswell in its environment, which made PyTorch's step 25% slower than its
best). PyTorch allocates and frees its tensors every step, kiln its arena once, on transparent
huge pages (runtime/host_tensor.cc); PyTorch gets huge pages too (glibc's malloc.hugetlb=1
tunable, the script re-runs itself with it): on 4 KiB pages each fresh page faults, which on a VM
here cost more than the compute (GPT-2's autocast step 3193 ms, with huge pages 1019 ms). The
model is tools/torch_parity.py's, the one kiln's parity test checks kiln against.
kiln runs `kiln bench` (each of --backends, every core). A shared VM's speed drifts by tens of
percent within minutes, so the two run in interleaved rounds (kiln's training step, PyTorch's,
kiln's forward, PyTorch's; --rounds of them), each ratio is taken within a round, and the table
gives medians. Nothing else should run meanwhile (a concurrent build
halves either figure).
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

# glibc reads its tunables when the process starts: set, the script runs again.
HUGE_PAGES = "glibc.malloc.hugetlb=1"
if HUGE_PAGES not in os.environ.get("GLIBC_TUNABLES", "").split(":"):
    tunables = ":".join(t for t in (os.environ.get("GLIBC_TUNABLES"), HUGE_PAGES) if t)
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, GLIBC_TUNABLES=tunables))

CALLERS_CORETYPE = os.environ.get("OPENBLAS_CORETYPE")
os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import torch  # noqa: E402  (after the OpenBLAS settings)
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch_parity  # noqa: E402


def blas_library():
    """The BLAS library this process's torch loaded (Debian's torch links libblas.so.3, an
    alternative that is netlib's reference BLAS unless OpenBLAS is installed: 30x slower)."""
    torch.ones(2, 2) @ torch.ones(2, 2)
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libblas.so" in line or "libopenblas" in line:
                return line.split()[-1]
    return "unknown"


BENCH_GPT = {"n_layers": "4", "d_model": "256", "n_heads": "4", "d_ff": "1024", "seq_len": "128",
             "batch": "16", "vocab": "256", "norm": "pre", "activation": "gelu",
             "position": "learned"}
GPT2 = {"n_layers": "12", "d_model": "768", "n_heads": "12", "d_ff": "3072", "seq_len": "64",
        "batch": "4", "vocab": "50257", "norm": "pre", "activation": "gelu_tanh",
        "position": "learned", "max_len": "1024"}
# torch_parity.Config reads kiln's resolved settings; these are kiln's defaults for the rest.
DEFAULTS = {"n_kv_heads": "0", "norm_kind": "layernorm", "norm_eps": "auto", "relative_k": "8",
            "max_len": "512", "tie_embeddings": "true", "bias": "true", "pad_id": "0",
            "label_smoothing": "0", "ignore_index": "-100", "dropout": "0", "dtype": "f32"}


def kiln_bench(kiln, backend, precision, settings, train, steps):
    cmd = [kiln, "bench", "gpt", "--backend", backend, "--precision", precision, "--steps",
           str(steps), "--warmup", "2"]
    cmd += [f"--set={k}={v}" for k, v in settings.items()]
    if train:
        cmd.append("--train")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    ms = float(re.search(r"median ([0-9.]+) ms", out).group(1))
    rss = re.search(r"peak RSS ([0-9.]+ [KMG]iB)", out).group(1)
    compiled = float(re.search(r"compiled in ([0-9.]+) s", out).group(1))
    return ms / 1e3, rss, compiled


# PyTorch's settings: (name, autocast to bf16, torch threads).
TORCH_RUNS = [("f32", False, 1), ("bf16 x1", True, 1), ("bf16 x2", True, 2)]


def torch_steps(settings, autocast, threads):
    """The PyTorch model, built once: {"train": fn, "forward": fn}, fn(steps) -> median seconds,
    in f32 or under autocast to bf16, at `threads` torch threads."""
    raw = dict(DEFAULTS, **settings)
    torch.manual_seed(0)
    net, cfg, _ = torch_parity.build("gpt", raw)
    b, t, v = int(raw["batch"]), int(raw["seq_len"]), int(raw["vocab"])
    tokens = torch.randint(0, v, (b, t))
    targets = torch.randint(0, v, (b, t))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def train_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = net(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, v), targets.reshape(-1))
        loss.backward()
        opt.step()

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            net(tokens)

    def timed(fn):
        def run(steps):
            torch.set_num_threads(threads)
            for _ in range(2):
                fn()
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        return run

    return {"train": timed(train_step), "forward": timed(forward)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build", "kiln"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpt2", action="store_true", help="GPT-2 124M (llm.c CPU configuration)")
    ap.add_argument("--backends", default="highway,llvm",
                    help="kiln backends to run, comma-separated (each in every round)")
    ap.add_argument("--precisions", default="f32,bf16",
                    help="kiln's --precision values to run, comma-separated (each backend in each)")
    args = ap.parse_args()
    backends = [(b, p) for b in args.backends.split(",") for p in args.precisions.split(",")]
    settings = GPT2 if args.gpt2 else BENCH_GPT
    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"torch_compare: no kiln executable at {args.kiln} (build it, or pass --kiln)")
    blas = blas_library()
    if "openblas" not in blas:
        sys.exit(f"torch_compare: PyTorch uses {blas}, not OpenBLAS: its times would not be "
                 "PyTorch's best here (bash tools/deps.sh --bench installs libopenblas-dev)")

    torch_runs = {name: torch_steps(settings, autocast, threads)
                  for name, autocast, threads in TORCH_RUNS}
    # Per round: ({(backend, precision): kiln seconds}, {PyTorch setting: seconds}).
    rounds = {"train": [], "forward": []}
    rss, compiled = {}, {}
    for _ in range(args.rounds):
        for key in rounds:
            kiln_s, torch_s = {}, {}
            for b in backends:
                kiln_s[b], rss[b, key], compiled[b, key] = kiln_bench(
                    args.kiln, *b, settings, key == "train", args.steps)
                name = TORCH_RUNS[len(torch_s) % len(TORCH_RUNS)][0]
                torch_s[name] = torch_runs[name][key](args.steps)  # interleaved with kiln's
            for name, _, _ in TORCH_RUNS:
                if name not in torch_s:
                    torch_s[name] = torch_runs[name][key](args.steps)
            torch_s["bf16 best"] = min(torch_s["bf16 x1"], torch_s["bf16 x2"])
            rounds[key].append((kiln_s, torch_s))
    t_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB

    print(f"GPT {' '.join(f'{k}={v}' for k, v in settings.items())}")
    print(f"PyTorch {torch.__version__} with {blas}, OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, torch threads 1, "
          f"GLIBC_TUNABLES={os.environ['GLIBC_TUNABLES']}")
    if CALLERS_CORETYPE not in (None, "SkylakeX"):
        print(f"(OPENBLAS_CORETYPE={CALLERS_CORETYPE} in the environment was overridden)")
    print(f"medians of {args.rounds} interleaved rounds of {args.steps} steps (ratios within a round)")
    for key in ("train", "forward"):
        print(f"PyTorch {key}: " + ", ".join(
            f"{name} {1e3 * statistics.median(r[1][name] for r in rounds[key]):.1f} ms"
            for name, _, _ in TORCH_RUNS))
    print(f"{'':30}{'kiln':>10}{'vs PyTorch f32':>16}{'vs PyTorch bf16 best':>22}")
    for name, key in (("train step", "train"), ("forward", "forward")):
        for b in backends:
            k = statistics.median(r[0][b] for r in rounds[key])
            vs = lambda t: statistics.median(r[1][t] / r[0][b] for r in rounds[key])
            print(f"{name + ' (' + b[0] + ', ' + b[1] + ')':30}{1e3 * k:>7.1f} ms"
                  f"{vs('f32'):>15.2f}x{vs('bf16 best'):>21.2f}x")
    for b in backends:
        print(f"kiln {b[0]} {b[1]}: peak RSS {rss[b, 'train']} (train), {rss[b, 'forward']} "
              f"(forward); compiled in {compiled[b, 'train']:.2f} s (train), "
              f"{compiled[b, 'forward']:.2f} s (forward)")
    print(f"PyTorch peak RSS {t_rss:.1f} MiB (both, one process)")


if __name__ == "__main__":
    main()
