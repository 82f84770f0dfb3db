// Device memory for the CUDA tests (tests/test-cuda-*.cpp): a cudaMalloc'd buffer, optionally
// filled from a host vector, freed on scope exit. Included only where RAGKV_HAVE_CUDA is set.
#pragma once
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ragkv::test {

// A cudaMalloc'd buffer, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    REQUIRE(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)) == cudaSuccess);
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (!host.empty())
      REQUIRE(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> host(n);
    if (n > 0) REQUIRE(cudaMemcpy(host.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
};

}  // namespace ragkv::test
