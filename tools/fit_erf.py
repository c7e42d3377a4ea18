#!/usr/bin/python3
"""Fits the piecewise polynomial of kiln's vectorized erf (runtime/kernels/erf_table.h) and prints
the table. Run with /usr/bin/python3 (numpy).

erf on |x| in [0, 4) is cut into 8 intervals of 0.5 (from 4 on, erf rounds to 1 in float):
  interval 0, z in [0, 0.5):  erf(z) = z P0(z^2)           (odd: relative accuracy near 0)
  interval i, z in [i/2, i/2 + 1/2): erf(z) = Pi(z - c_i), c_i = i/2 + 1/4
each P of degree 6. Each is a weighted least-squares fit on 2000 Chebyshev nodes, refined toward
the minimax fit by Lawson's iteration (weights times the error, 30 rounds). The check at the end
evaluates the float-rounded table as the kernels do (Horner, fused multiply-adds in float) and
prints the largest error in ulps against math.erf on a dense sweep: 2 (near 0, from z z and z P),
1 elsewhere.
"""
import math

import numpy as np

DEGREE = 6
f32 = np.float32


def fit(fn, lo, hi):
    n = 2000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * t
    y = np.array([fn(v) for v in x])
    a = np.vander(x, DEGREE + 1, increasing=True)
    w = np.ones(n)
    for _ in range(30):
        c, *_ = np.linalg.lstsq(a * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)
        w = w * np.abs(a @ c - y)
        w /= w.sum()
    return c


def horner(c, s):  # float fused multiply-adds: the product of two floats is exact in double
    p = f32(c[-1])
    for k in c[-2::-1]:
        p = f32(np.float64(p) * np.float64(s) + np.float64(k))
    return p


def erf32(table, z):
    if not z < 4:
        return f32(1)
    i = int(z * f32(2))
    if i == 0:
        return f32(z * horner(table[0], f32(z * z)))
    return horner(table[i], f32(z - f32(0.5 * i + 0.25)))


def ulps(a, b):
    ia, ib = np.array([a, b], dtype=np.float32).view(np.int32)
    return abs(int(ia) - int(ib))


def main():
    table = [fit(lambda u: math.erf(math.sqrt(u)) / math.sqrt(u) if u > 0 else 2 / math.sqrt(math.pi),
                 0, 0.25)]
    for i in range(1, 8):
        c = 0.5 * i + 0.25
        table.append(fit(lambda s: math.erf(s + c), -0.25, 0.25))
    table = [[f32(v) for v in row] for row in table]
    worst = max(ulps(erf32(table, f32(z)), f32(math.erf(float(f32(z)))))
                for z in np.linspace(0, 4.5, 200001, dtype=np.float32))
    print(f"// largest error {worst} ulps (tools/fit_erf.py)")
    for k in range(DEGREE + 1):
        row = ", ".join(f"{float(table[i][k]):.9g}f" for i in range(8))
        print(f"    {{{row}}},")


if __name__ == "__main__":
    main()
