// The machine's FP32 FMA peak, measured: what `kiln bench` divides achieved GFLOP/s by, so that
// "% of peak" is of this machine as it runs now (a VM shares its cores, clocks change), not of a
// figure from a data sheet.
#pragma once

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

// FMA throughput, in FLOP/s, of all the pool's threads at once (each running independent chains
// of fused multiply-adds on the widest SIMD target), over about `seconds`.
double measurePeakFlops(runtime::ThreadPool &pool, double seconds = 0.05);

} // namespace kiln::kernels
