// gemm_nt / gemm_nn on OpenBLAS (OpenMP flavour: one thread pool with our kernels) or plain loops.
#include "core/backend/cpu-gemm.h"

#include <algorithm>

#ifdef RAGKV_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace ragkv {

void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, float alpha, bool rows_independent) {
#ifdef RAGKV_HAVE_OPENBLAS
  if (m == 1 && !rows_independent) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, a, 1, 0.f, c, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda, b, ldb, 0.f, c, ldc);
  }
#else
  (void)rows_independent;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.f;
      for (int64_t p = 0; p < k; ++p) s += a[i * lda + p] * b[j * ldb + p];
      c[i * ldc + j] = alpha * s;
    }
#endif
}

void gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc) {
#ifdef RAGKV_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
#else
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    std::fill(ci, ci + n, 0.f);
    for (int64_t p = 0; p < k; ++p) {
      const float aip = a[i * lda + p];
      const float* bp = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
#endif
}

bool gemm_is_blas() {
#ifdef RAGKV_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

void gemm_set_threads(int n) {
#ifdef RAGKV_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace ragkv
