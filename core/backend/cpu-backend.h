// The CPU backend (DESIGN.md §3): every op of core/backend/backend.h on host memory, with OpenBLAS
// SGEMM (when built with it) and OpenMP-threaded kernels. The numerical reference every other
// backend is tested against.
#pragma once
#include <memory>

#include "core/backend/backend.h"

namespace ragkv {

// threads ≤ 0: OpenMP's default.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace ragkv
