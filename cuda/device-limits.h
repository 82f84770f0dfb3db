// What the chip reaches outside ragkv's kernels (issue 40: GPU figures against the chip's limits,
// "also report the rate cuBLAS reaches on a large GEMM on that chip"): cuBLAS GEMMs of a large
// square size — f16 operands with f32 output, the form ragkv's prefill GEMMs take, and bf16 in and
// out, the form data-sheet peaks are quoted for — and a device-to-device copy (the bandwidth a
// memory-bound kernel such as a decode step's GEMV can hope for). `ragkv bench device` prints them.
#pragma once
#include <cstdint>
#include <string>

namespace ragkv {

struct DeviceLimits {
  std::string device;  // "cuda:0 (NVIDIA H200)"
  int64_t gemm_size = 0;  // m = n = k
  double gemm_f16_f32out_tflops = 0;  // best of the timed runs
  double gemm_bf16_tflops = 0;
  int64_t copy_bytes = 0;
  double copy_gb_s = 0;  // (read + written bytes) / time
};

// Times each measurement `repetitions` times after a warm-up on CUDA device `device`; best run.
// Throws ragkv::Error when there is no such device, memory runs out or cuBLAS fails.
DeviceLimits measure_device_limits(int device, int64_t gemm_size, int64_t copy_bytes, int repetitions);

}  // namespace ragkv
