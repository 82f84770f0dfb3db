// cuBLAS looked up at run time (cublas-loader.h).
#include "cuda/cublas-loader.h"

#include <dlfcn.h>

#include "core/util/error.h"

namespace ragkv::cublas {

namespace {

template <typename F>
void resolve(void* lib, const std::string& name, const char* symbol, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!f) fail("cuBLAS: {} has no function {} (a cuBLAS of another major version?)", name, symbol);
}

}  // namespace

Api load(const std::string& name) {
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef RAGKV_CUDA_LIBRARY_DIR
  if (!lib && name.find('/') == std::string::npos)
    lib = dlopen((std::string(RAGKV_CUDA_LIBRARY_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (!lib) {
    const char* why = dlerror();
    fail("cuBLAS: cannot load {} ({}); the CUDA backend needs the CUDA toolkit's cuBLAS on the library path "
         "(LD_LIBRARY_PATH)",
         name, why ? why : "no reason given");
  }
  // The library stays loaded for the life of the process (handles are destroyed at exit).
  Api a;
  resolve(lib, name, "cublasCreate_v2", a.create);
  resolve(lib, name, "cublasDestroy_v2", a.destroy);
  resolve(lib, name, "cublasSetStream_v2", a.set_stream);
  resolve(lib, name, "cublasSetWorkspace_v2", a.set_workspace);
  resolve(lib, name, "cublasSetMathMode", a.set_math_mode);
  resolve(lib, name, "cublasGemmEx", a.gemm_ex);
  resolve(lib, name, "cublasGetStatusName", a.status_name);
  resolve(lib, name, "cublasGetStatusString", a.status_string);
  return a;
}

const Api& api() {
  static const Api a = load("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  return a;
}

}  // namespace ragkv::cublas
