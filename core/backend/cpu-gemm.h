// The f32 GEMM shapes the CPU backend needs, on OpenBLAS SGEMM when built with it, else plain
// OpenMP loops: projections on F32 weights (the embedder) and attention's score and value products.
#pragma once
#include <cstdint>

namespace ragkv {

// C[m][n] = alpha · A[m][k] · B[n][k]ᵀ with leading dimensions. m == 1 may use SGEMV (attention);
// with rows_independent the product is an SGEMM for every m, so a row of C is the same whatever m.
void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, float alpha, bool rows_independent = false);

// C[m][n] = A[m][k] · B[k][n].
void gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc);

// Whether gemm_nt is OpenBLAS's SGEMM (which runs on the calling thread inside a parallel region,
// so the caller may split one product over threads); false for the plain loops.
bool gemm_is_blas();

// Sets OpenBLAS's thread count (no-op without it).
void gemm_set_threads(int n);

}  // namespace ragkv
