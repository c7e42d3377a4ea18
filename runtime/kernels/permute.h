// Axis permutation of a row-major tensor of any element size (the transpose op:
// out.shape[d] = in.shape[perm[d]], out[i] = in[i permuted back]). A pure copy, so results are
// bit-exact and the thread count changes nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

void permute(const void *in, void *out, const std::vector<int64_t> &inShape,
             const std::vector<int64_t> &perm, int64_t elementBytes, runtime::ThreadPool *pool);

} // namespace kiln::kernels
