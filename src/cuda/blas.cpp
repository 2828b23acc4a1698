// SPDX-License-Identifier: MIT
// cuBLAS behind include/shardex/device/cuda/blas.hpp. The _64 entry points:
// sizes and leading dims past 2^31 (seq * heads * dh) are not cut to int.
#include "shardex/device/cuda/blas.hpp"

#include <cublas_v2.h>

#include <string>

#include "shardex/core/error.hpp"
#include "shardex/device/cuda/kernels.hpp"
#include "shardex/device/cuda/runtime.hpp"

namespace shardex::cuda {

namespace {

void check_blas(cublasStatus_t st, const GemmShape& g) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw backend_error(std::string("cuBLAS gemm (m ") + std::to_string(g.m) + ", n " + std::to_string(g.n) + ", k " +
                          std::to_string(g.k) + ", batch " + std::to_string(g.batch) +
                          ") failed: " + cublasGetStatusString(st),
                      static_cast<int>(st));
}

cublasStatus_t batched(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, const GemmShape& g,
                       const float* alpha, const float* b, const float* a, const float* beta, float* c) {
  return cublasSgemmStridedBatched_64(h, ob, oa, g.n, g.m, g.k, alpha, b, g.ldb, g.stride_b, a, g.lda, g.stride_a, beta,
                                      c, g.ldc, g.stride_c, g.batch);
}
cublasStatus_t batched(cublasHandle_t h, cublasOperation_t ob, cublasOperation_t oa, const GemmShape& g,
                       const double* alpha, const double* b, const double* a, const double* beta, double* c) {
  return cublasDgemmStridedBatched_64(h, ob, oa, g.n, g.m, g.k, alpha, b, g.ldb, g.stride_b, a, g.lda, g.stride_a, beta,
                                      c, g.ldc, g.stride_c, g.batch);
}

}  // namespace

template <class T>
void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.k == 0) {  // no products: C = beta C (cuBLAS would reject the zero leading dims)
    kernels::scale_matrices(c, g.m, g.n, g.ldc, g.stride_c, g.batch, beta, compute_stream());
    return;
  }
  auto* h = static_cast<cublasHandle_t>(blas_handle());
  // Column-major view: C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m).
  const cublasOperation_t ob = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, oa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_blas(batched(h, ob, oa, g, &alpha, b, a, &beta, c), g);
}

template void gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
template void gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);

}  // namespace shardex::cuda
