// Which SIMD target the kernels' dynamic dispatch runs on this CPU ("AVX3", "AVX2", ...), for
// `kiln bench` output and for the tests that force each compiled target in turn.
#pragma once

#include <string>

namespace kiln::kernels {

std::string activeTarget();

} // namespace kiln::kernels
