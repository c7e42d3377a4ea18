// The coefficients of the vectorized erf (vmath-inl.h's vErf and the LLVM backend's copy in
// codegen/llvm/vector_math.cc, which must give the same bits): |x| in [0, 4) is cut into 8
// intervals of 0.5, and interval i = trunc(2 |x|) evaluates
//   i = 0:  erf(z) = z P0(z^2)            (odd, so the error near 0 is relative)
//   i > 0:  erf(z) = Pi(z - (i/2 + 1/4))  (|z - centre| <= 1/4)
// with Pi(s) = sum_k kErfPoly[k][i] s^k by Horner from k = 6 (no division, no exp: about half the
// operations of 1 - t exp(-z^2 + P(t)) with t = 1 / (1 + z/2)). From |x| = 4 on erf is +-1 (it
// rounds to 1 in float from 3.92). Fitted and checked by tools/fit_erf.py: at most 2 ulps near 0,
// 1 elsewhere. A row holds 16 floats (the last 8 zero) so that one AVX-512 load fetches it whole;
// each lane then picks its interval's coefficient with one permute.
#pragma once

namespace kiln::kernels {

inline constexpr int kErfDegree = 6, kErfIntervals = 8;

alignas(64) inline constexpr float kErfPoly[kErfDegree + 1][16] = {
    {1.12837923f, 0.711155653f, 0.92290014f, 0.986671686f, 0.998537302f, 0.999899387f, 0.999995708f,
     0.999999881f},
    {-0.376126379f, 0.642931521f, 0.236521214f, 0.0527748391f, 0.00714230025f, 0.00058629422f,
     2.91936431e-05f, 8.81886194e-07f},
    {0.112837911f, -0.482198089f, -0.295651942f, -0.0923561826f, -0.0160701238f, -0.00161227013f,
     -9.48721427e-05f, -3.30646799e-06f},
    {-0.02686611f, 0.0267272983f, 0.16752322f, 0.0901776478f, 0.0217269603f, 0.00275820866f,
     0.000195219531f, 7.91175626e-06f},
    {0.00522327842f, 0.150672257f, -0.00612412905f, -0.0481064878f, -0.0190896913f, -0.00325759314f,
     -0.000286049442f, -1.3768471e-05f},
    {-0.000850685756f, -0.0512618758f, -0.0467786565f, 0.00596977584f, 0.0105813816f, 0.0028258129f,
     0.000332612719f, 2.02048941e-05f},
    {0.00010824018f, -0.0265467688f, 0.0205130707f, 0.00905976631f, -0.00276422384f, -0.0016690999f,
     -0.000275038037f, -2.08730689e-05f},
};

} // namespace kiln::kernels
