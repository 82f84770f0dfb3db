// cuBLAS, loaded at run time: the CUDA backend calls eight cuBLAS functions, and linking the library
// made every run of the binary — CPU runs included — map libcublas and libcublasLt at start
// (220 MiB of resident memory for `ragkv --help`, more than the whole SmolLM2 model). They are
// now looked up with dlopen/dlsym when the first CUDA backend is made; the CUDA runtime is linked
// statically for the same reason (it loads the driver itself on its first call).
#pragma once
#include <cublas_v2.h>

#include <string>

namespace ragkv::cublas {

// The functions, typed from cuBLAS's own declarations (cublasCreate etc. are macros for the _v2
// entry points, the symbols the library exports).
struct Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  // (cublasGemmEx has a C++ overload in the header, so its type is spelled out: the C entry point)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The library the headers belong to (libcublas.so.<CUBLAS_VER_MAJOR>), loaded once: by its name
// (LD_LIBRARY_PATH, the loader's cache), else from the CUDA toolkit's library folder found at
// build time. Throws ragkv::Error naming the library and the loader's message when it is missing
// or lacks a function.
const Api& api();

// One load of the library `name` (for api() and the tests); throws as api() does.
Api load(const std::string& name);

}  // namespace ragkv::cublas
