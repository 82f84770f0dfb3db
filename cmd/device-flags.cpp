// The backend factory behind --device and --threads.
#include "cmd/device-flags.h"

#include <cstdio>
#include <thread>

#include "core/backend/cpu-backend.h"
#include "core/eval/baseline-cache.h"
#include "core/eval/device-record.h"
#include "core/util/error.h"
#ifdef RAGKV_HAVE_CUDA
#include "cuda/cuda-backend.h"
#endif

namespace ragkv::cli {

int DeviceFlags::thread_count() const { return threads > 0 ? threads : int(std::thread::hardware_concurrency()); }

bool cuda_available() {
#ifdef RAGKV_HAVE_CUDA
  return cuda_device_present();
#else
  return false;
#endif
}

std::unique_ptr<Backend> DeviceFlags::make_backend() const {
  if (device == "cpu") return make_cpu_backend(thread_count());
  if (device == "cuda") {
#ifdef RAGKV_HAVE_CUDA
    if (!cuda_device_present()) fail("--device cuda: no CUDA device is available on this machine");
    return make_cuda_backend(0);
#else
    fail("--device cuda: this ragkv was built without the CUDA backend (nvcc was not found)");
#endif
  }
  // "auto": the GPU when this build has CUDA, a device is present and `ragkv device-check` passed on
  // that kind of chip with this build (core/eval/device-record.h; DESIGN.md §1), else the CPU.
  if (device == "auto") {
#ifdef RAGKV_HAVE_CUDA
    if (cuda_device_present()) {
      auto gpu = make_cuda_backend(0);
      const DeviceVerdict v = device_qualified(device_records_dir(), gpu->kernels(), engine_fingerprint());
      if (v.qualified) return gpu;
      std::fprintf(stderr, "ragkv: --device auto: running on the CPU: %s (`ragkv device-check` qualifies the GPU, "
                   "or pass --device cuda)\n", v.reason.c_str());
    }
#endif
    return make_cpu_backend(thread_count());
  }
  fail("unknown device '{}' (expected cpu, cuda or auto)", device);
}

}  // namespace ragkv::cli
