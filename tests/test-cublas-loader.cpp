// cuBLAS looked up at run time (cuda/cublas-loader.h): the toolkit's library loads and has every
// function the CUDA backend calls, a missing library is an error naming it, and the binary links
// neither cuBLAS nor the shared CUDA runtime (so a CPU run does not map them; ragkv_tests links
// ragkv_cuda as ragkv does). Runs without a GPU: loading cuBLAS needs no device.
#ifdef RAGKV_HAVE_CUDA

#include <doctest/doctest.h>

#include <link.h>

#include <string>
#include <vector>

#include "cuda/cublas-loader.h"
#include "core/util/error.h"

TEST_CASE("cublas loader: the toolkit's cuBLAS loads with every function the backend calls") {
  const ragkv::cublas::Api& a = ragkv::cublas::api();
  CHECK(bool(a.create));
  CHECK(bool(a.destroy));
  CHECK(bool(a.set_stream));
  CHECK(bool(a.gemm_ex));
  CHECK(bool(a.set_math_mode));
  REQUIRE(bool(a.status_name));
  REQUIRE(bool(a.status_string));
  CHECK(std::string(a.status_name(CUBLAS_STATUS_NOT_INITIALIZED)) == "CUBLAS_STATUS_NOT_INITIALIZED");
  CHECK(&ragkv::cublas::api() == &a);  // loaded once
}

TEST_CASE("cublas loader: a missing library is an error naming it and the way out") {
  CHECK_THROWS_WITH_AS(ragkv::cublas::load("libcublas.so.999"),
                       doctest::Contains("cannot load libcublas.so.999"), ragkv::Error);
  CHECK_THROWS_WITH_AS(ragkv::cublas::load("libcublas.so.999"), doctest::Contains("LD_LIBRARY_PATH"), ragkv::Error);
}

namespace {

// The DT_NEEDED entries of the running executable (the shared libraries it was linked against).
std::vector<std::string> needed_libraries() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        // The executable comes first, with an empty name.
        const ElfW(Dyn)* dyn = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        if (!dyn) return 1;
        const char* strtab = nullptr;
        for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d)
          if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(d->d_un.d_ptr);
        for (const ElfW(Dyn)* d = dyn; strtab && d->d_tag != DT_NULL; ++d)
          if (d->d_tag == DT_NEEDED) static_cast<std::vector<std::string>*>(data)->push_back(strtab + d->d_un.d_val);
        return 1;  // the executable only
      },
      &out);
  return out;
}

}  // namespace

TEST_CASE("cublas loader: the binary links neither cuBLAS nor the shared CUDA runtime (CPU runs do not map them)") {
  const std::vector<std::string> libs = needed_libraries();
  REQUIRE_FALSE(libs.empty());  // libc at least
  for (const std::string& lib : libs) {
    CAPTURE(lib);
    CHECK(lib.find("libcublas") == std::string::npos);
    CHECK(lib.find("libcudart") == std::string::npos);
  }
}

#endif  // RAGKV_HAVE_CUDA
