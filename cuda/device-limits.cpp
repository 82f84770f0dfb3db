// cuBLAS GEMM and copy rates of one device, timed with CUDA events (device-limits.h).
#include "cuda/device-limits.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>

#include "core/util/error.h"
#include "cuda/cublas-loader.h"
#include "cuda/cuda-check.h"

namespace ragkv {

namespace {

// Device memory freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      fail("bench device: cannot allocate {} bytes of device memory ({})", bytes, cudaGetErrorString(err));
    }
    CUDA_CHECK(cudaMemset(p, 0x3c, bytes));  // 0x3c3c: 1.06 in f16, 0.0115 in bf16; finite either way
  }
  ~DeviceBuffer() { CUDA_CHECK_NOTHROW(cudaFree(p)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    CUDA_CHECK_NOTHROW(cudaEventDestroy(start));
    CUDA_CHECK_NOTHROW(cudaEventDestroy(stop));
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// The best time in ms of `work` queued on `stream`, over `repetitions` runs after one warm-up.
double best_ms(cudaStream_t stream, int repetitions, const std::function<void()>& work) {
  Events ev;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep <= repetitions; ++rep) {
    CUDA_CHECK(cudaEventRecord(ev.start, stream));
    work();
    CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    if (rep > 0) best = std::min(best, double(ms));
  }
  return best;
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("bench device: {} failed: {}", what, cublas::api().status_name(st));
}

}  // namespace

DeviceLimits measure_device_limits(int device, int64_t gemm_size, int64_t copy_bytes, int repetitions) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || device < 0 || device >= n_dev) {
    (void)cudaGetLastError();
    fail("bench device: CUDA device {} is not available ({} present)", device, n_dev);
  }
  if (gemm_size <= 0 || gemm_size > std::numeric_limits<int>::max() || copy_bytes <= 0)
    fail("bench device: a GEMM size of {} and a copy of {} bytes", gemm_size, copy_bytes);
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceLimits r;
  r.device = fmt::format("cuda:{} ({})", device, prop.name);
  r.gemm_size = gemm_size;
  r.copy_bytes = copy_bytes;

  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  try {
    check_cublas(cublas::api().create(&h), "cublasCreate");
    check_cublas(cublas::api().set_stream(h, stream), "cublasSetStream");
    const int n = int(gemm_size);
    const size_t values = size_t(gemm_size) * size_t(gemm_size);
    const DeviceBuffer a{values * 2}, b{values * 2}, c{values * 4};
    const double flop = 2.0 * double(gemm_size) * double(gemm_size) * double(gemm_size);
    // The layout of ragkv's prefill GEMMs (cuda-matmul.cpp): A transposed, f32 accumulation.
    const auto tflops = [&](cudaDataType operands, cudaDataType out, const char* what) {
      const float one = 1.f, zero = 0.f;
      const double ms = best_ms(stream, repetitions, [&] {
        check_cublas(cublas::api().gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.p, operands, n, b.p, operands,
                                           n, &zero, c.p, out, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     what);
      });
      return flop / (ms * 1e-3) / 1e12;
    };
    r.gemm_f16_f32out_tflops = tflops(CUDA_R_16F, CUDA_R_32F, "cublasGemmEx (f16, f32 out)");
    r.gemm_bf16_tflops = tflops(CUDA_R_16BF, CUDA_R_16BF, "cublasGemmEx (bf16)");

    const DeviceBuffer src{size_t(copy_bytes)}, dst{size_t(copy_bytes)};
    const double copy_ms = best_ms(stream, repetitions, [&] {
      CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, size_t(copy_bytes), cudaMemcpyDeviceToDevice, stream));
    });
    r.copy_gb_s = 2.0 * double(copy_bytes) / (copy_ms * 1e-3) / 1e9;
  } catch (...) {
    if (h) (void)cublas::api().destroy(h);
    CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
    throw;
  }
  (void)cublas::api().destroy(h);
  CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  return r;
}

}  // namespace ragkv
