// Checked CUDA / cuBLAS calls: a failing call throws ragkv::Error naming the error, the
// statement, the file and the line (llm.c's cudaCheck). CUDA_CHECK_NOTHROW is for destructors
// and other places that must not throw: it reports to stderr instead.
//
// This header stays free of fmt (core/util/error.h) so that .cu files can include it: fmt 9's headers
// do not compile under nvcc in C++20 mode. The failure paths live out of line in cuda-check.cpp,
// compiled by the host compiler.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace ragkv {

// Throw ragkv::Error. cuda_check_fail first clears the runtime's last-error slot, so a caught
// error does not resurface at the next launch check (sticky errors poison the context anyway).
[[noreturn]] void cuda_check_fail(cudaError_t err, const char* stmt, const char* file, int line);
[[noreturn]] void cublas_check_fail(cublasStatus_t st, const char* stmt, const char* file, int line);
// Print to stderr. cudaErrorCudartUnloading (memory freed during process exit, after the
// runtime shut down) is expected and stays silent.
void cuda_check_report(cudaError_t err, const char* stmt, const char* file, int line) noexcept;
// Throw ragkv::Error "internal: <what>" for a broken precondition of a launcher (a caller's bug,
// not a CUDA error), from .cu files that cannot format messages themselves.
[[noreturn]] void cuda_internal_fail(const char* what);

}  // namespace ragkv

#define CUDA_CHECK(expr)                                                               \
  do {                                                                                 \
    const cudaError_t ragkv_cuda_err_ = (expr);                                        \
    if (ragkv_cuda_err_ != cudaSuccess)                                                \
      ::ragkv::cuda_check_fail(ragkv_cuda_err_, #expr, __FILE__, __LINE__);            \
  } while (0)

#define CUBLAS_CHECK(expr)                                                             \
  do {                                                                                 \
    const cublasStatus_t ragkv_cublas_st_ = (expr);                                    \
    if (ragkv_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::ragkv::cublas_check_fail(ragkv_cublas_st_, #expr, __FILE__, __LINE__);         \
  } while (0)

#define CUDA_CHECK_NOTHROW(expr)                                                       \
  do {                                                                                 \
    const cudaError_t ragkv_cuda_err_ = (expr);                                        \
    if (ragkv_cuda_err_ != cudaSuccess)                                                \
      ::ragkv::cuda_check_report(ragkv_cuda_err_, #expr, __FILE__, __LINE__);          \
  } while (0)
