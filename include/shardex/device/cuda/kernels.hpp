// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The CUDA kernels of the Cuda device, as host functions over raw
/// device pointers that launch on a given stream. Defined in src/cuda/kernels.cu
/// for float and double; this header is all the C++ side sees (no Eigen ever
/// meets nvcc). Every launcher accepts n == 0 and then launches nothing.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "shardex/device/fused_program.hpp"
#include "shardex/device/optimizer_ops.hpp"

namespace shardex::cuda::kernels {

/// p[0, n) = v.
template <class T>
void fill(T* p, std::int64_t n, T v, cudaStream_t s);
/// y += alpha * x
template <class T>
void axpy(std::int64_t n, T alpha, const T* x, T* y, cudaStream_t s);
/// `batch` matrices of m x n with row stride ld, `stride` apart: c *= beta (0: set to zero).
template <class T>
void scale_matrices(T* c, std::int64_t m, std::int64_t n, std::int64_t ld, std::int64_t stride, std::int64_t batch,
                    T beta, cudaStream_t s);
/// *out = sum of x[0, n), in one block, in a fixed order (deterministic).
template <class T>
void sum(const T* x, std::int64_t n, T* out, cudaStream_t s);
/// out (cols x rows) = in (rows x cols) transposed.
template <class T>
void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols, cudaStream_t s);
/// out (outer, inner) = in (outer, extent, inner) summed over the middle dim.
template <class T>
void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner, cudaStream_t s);
/// out (outer, extent, inner) = g (outer, inner) repeated along the middle dim.
template <class T>
void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner, cudaStream_t s);
/// Each row of x (rows x cols) replaced by its softmax.
template <class T>
void softmax_rows(T* x, std::int64_t rows, std::int64_t cols, cudaStream_t s);
/// dp = scale * p * (dp - rowsum(dp * p)), row by row: softmax's backward, in place.
template <class T>
void softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale, cudaStream_t s);
/// One fused Adam step over n elements (optim::adam_update_at); g is left zero with step.clear_grad.
template <class T>
void adam_update(T* p, T* m, T* v, T* g, std::int64_t n, const optim::AdamStep& step, cudaStream_t s);
/// Layer norm and RMS norm (device/norm_ops.hpp; Host's loops of the same
/// names say what each computes): one thread per row, or per column for the
/// weight's gradient.
template <class T>
void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows, std::int64_t cols,
                  T eps, bool rms, cudaStream_t s);
/// dx of each row (norms::normalize_row_backward).
template <class T>
void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, std::int64_t rows,
                         std::int64_t cols, bool rms, cudaStream_t s);
/// dw and db (may be null) as column sums over the rows (norms::weight_grad_column).
template <class T>
void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db, std::int64_t rows,
                          std::int64_t cols, cudaStream_t s);
/// The token layers (device/token_ops.hpp; Host's loops of the same names
/// say what each computes).
template <class T, class I>
void embedding(const T* table, const I* ids, T* out, std::int64_t tokens, std::int64_t width, std::int64_t first,
               std::int64_t rows, cudaStream_t s);
/// Embedding's scatter-add (atomic: two tokens may select one row).
template <class T, class I>
void embedding_backward(T* dtable, const I* ids, const T* g, std::int64_t tokens, std::int64_t width,
                        std::int64_t first, std::int64_t rows, cudaStream_t s);
/// -inf where the key comes after the query in each of `blocks` (rows x cols)
/// score blocks whose first row is query `first_row` (tokens::causal_mask_at).
template <class T>
void causal_mask(T* scores, std::int64_t blocks, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                 cudaStream_t s);
/// max[t], sum_exp[t] and target_logit[t] of row t (tokens::row_max_sum_exp_and_target).
template <class T, class I>
void row_max_sum_exp_and_target(const T* logits, const I* targets, T* max, T* sum_exp, T* target_logit,
                                std::int64_t rows, std::int64_t cols, std::int64_t first, cudaStream_t s);
/// sum_exp[t] taken from local_max[t] to global_max[t] (tokens::rescaled_sum_exp).
template <class T>
void rescale_sum_exp(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows, cudaStream_t s);
/// dlogits = (softmax - one-hot) * scale per row (tokens::cross_entropy_grad_at).
template <class T, class I>
void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                            T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first, cudaStream_t s);
/// out[i] = program.value_at(i) for i < n.
template <class T>
void fused_forward(const FusedProgram<T>& program, T* out, std::int64_t n, cudaStream_t s);
/// program.backprop_at(i, g[i]) for i < n (atomic adds into broadcast leaves).
template <class T>
void fused_backward(const FusedProgram<T>& program, const T* g, std::int64_t n, cudaStream_t s);

}  // namespace shardex::cuda::kernels
