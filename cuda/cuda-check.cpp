// Failure paths of the checked CUDA / cuBLAS calls (cuda-check.h).
#include "cuda/cuda-check.h"

#include <cstdio>

#include "core/util/error.h"
#include "cuda/cublas-loader.h"

namespace ragkv {

void cuda_check_fail(cudaError_t err, const char* stmt, const char* file, int line) {
  (void)cudaGetLastError();
  fail("CUDA error {} ({}) in '{}' at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err), stmt,
       file, line);
}

void cublas_check_fail(cublasStatus_t st, const char* stmt, const char* file, int line) {
  fail("cuBLAS error {} ({}) in '{}' at {}:{}", cublas::api().status_name(st), cublas::api().status_string(st),
       stmt, file, line);
}

void cuda_internal_fail(const char* what) { fail("internal: {}", what); }

void cuda_check_report(cudaError_t err, const char* stmt, const char* file, int line) noexcept {
  if (err == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "ragkv: CUDA error %s (%s) in '%s' at %s:%d\n", cudaGetErrorName(err),
               cudaGetErrorString(err), stmt, file, line);
}

}  // namespace ragkv
