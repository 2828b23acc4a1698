// SPDX-License-Identifier: MIT
// The kernels of include/shardex/device/cuda/kernels.hpp. Plain grid-stride
// loops: correctness and clear failure first; the heavy math goes to cuBLAS.
#include "shardex/device/cuda/kernels.hpp"

#include <algorithm>
#include <string>

#include "shardex/device/cuda/runtime.hpp"
#include "shardex/device/norm_ops.hpp"
#include "shardex/device/token_ops.hpp"

namespace shardex::cuda::kernels {

namespace {

constexpr int block_size = 256;

/// Enough blocks to cover n, capped (the loops are grid-stride).
unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + block_size - 1) / block_size;
  return static_cast<unsigned>(std::min<std::int64_t>(std::max<std::int64_t>(blocks, 1), 65535));
}

/// Launch errors (bad configuration, no kernel image for this GPU) surface here.
void check_launch(const char* kernel) { check(cudaGetLastError(), (std::string("launching ") + kernel).c_str()); }

__device__ std::int64_t first_index() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

template <class T>
__global__ void fill_kernel(T* p, std::int64_t n, T v) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) p[i] = v;
}
template <class T>
__global__ void axpy_kernel(std::int64_t n, T alpha, const T* x, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}
template <class T>
__global__ void scale_matrices_kernel(T* c, std::int64_t m, std::int64_t n, std::int64_t ld, std::int64_t stride,
                                      std::int64_t batch, T beta) {
  const std::int64_t total = batch * m * n;
  for (std::int64_t i = first_index(); i < total; i += grid_stride()) {
    const std::int64_t b = i / (m * n), r = (i / n) % m, col = i % n;
    T& x = c[b * stride + r * ld + col];
    x = beta == T(0) ? T(0) : beta * x;  // beta 0 overwrites (NaN in c must not survive)
  }
}
template <class T>
__global__ void sum_kernel(const T* x, std::int64_t n, T* out) {
  __shared__ T partial[block_size];
  T acc = T(0);
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int w = block_size / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}
template <class T>
__global__ void transpose_kernel(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = first_index(); i < rows * cols; i += grid_stride()) {
    const std::int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = in[i];
  }
}
template <class T>
__global__ void sum_middle_kernel(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
  for (std::int64_t i = first_index(); i < outer * inner; i += grid_stride()) {
    const std::int64_t o = i / inner, k = i % inner;
    T acc = T(0);
    for (std::int64_t j = 0; j < extent; ++j) acc += in[(o * extent + j) * inner + k];
    out[i] = acc;
  }
}
template <class T>
__global__ void broadcast_middle_kernel(const T* g, T* out, std::int64_t outer, std::int64_t extent,
                                        std::int64_t inner) {
  for (std::int64_t i = first_index(); i < outer * extent * inner; i += grid_stride()) {
    const std::int64_t o = i / (extent * inner), k = i % inner;
    out[i] = g[o * inner + k];
  }
}
/// One thread per row: the rows of attention are short (the sequence).
template <class T>
__global__ void softmax_rows_kernel(T* x, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) {
    T* row = x + r * cols;
    T mx = row[0];
    for (std::int64_t c = 1; c < cols; ++c) mx = row[c] > mx ? row[c] : mx;
    T total = T(0);
    for (std::int64_t c = 0; c < cols; ++c) {
      row[c] = math::exp(row[c] - mx);
      total += row[c];
    }
    for (std::int64_t c = 0; c < cols; ++c) row[c] /= total;
  }
}
template <class T>
__global__ void softmax_backward_kernel(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) {
    const T* P = p + r * cols;
    T* D = dp + r * cols;
    T dot = T(0);
    for (std::int64_t c = 0; c < cols; ++c) dot += D[c] * P[c];
    for (std::int64_t c = 0; c < cols; ++c) D[c] = scale * P[c] * (D[c] - dot);
  }
}
template <class T>
__global__ void fused_forward_kernel(FusedProgram<T> program, T* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) out[i] = program.value_at(i);
}
template <class T>
__global__ void fused_backward_kernel(FusedProgram<T> program, const T* g, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    program.backprop_at(i, g[i], [](T* dst, T v, bool shared) {
      if (shared)
        atomicAdd(dst, v);  // a broadcast bias: many i share one element
      else
        *dst += v;
    });
}

template <class T>
__global__ void adam_update_kernel(T* p, T* m, T* v, T* g, std::int64_t n, optim::AdamTerms<T> step, bool clear_grad) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    clear_grad ? optim::adam_update_clearing_at(p, m, v, g, i, step) : optim::adam_update_at(p, m, v, g, i, step);
}

// Layer norm and RMS norm: the row and column functions of device/norm_ops.hpp.
template <class T>
__global__ void norm_forward_kernel(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                                    std::int64_t cols, T eps, bool rms) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) {
    norms::row_stats(x + r * cols, cols, eps, rms, mean + r, rstd + r);
    norms::normalize_row(x + r * cols, w, b, cols, mean[r], rstd[r], y + r * cols);
  }
}
template <class T>
__global__ void norm_backward_input_kernel(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                                           std::int64_t rows, std::int64_t cols, bool rms) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    norms::normalize_row_backward(x + r * cols, w, g + r * cols, cols, mean[r], rstd[r], rms, dx + r * cols);
}
template <class T>
__global__ void norm_backward_weight_kernel(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db,
                                            std::int64_t rows, std::int64_t cols) {
  for (std::int64_t c = first_index(); c < cols; c += grid_stride())
    norms::weight_grad_column(x, g, mean, rstd, rows, cols, c, dw, db);
}

// The token layers: the element and row functions of device/token_ops.hpp,
// one thread per element (embedding, the logit gradient) or per row (the row
// max and sums, as softmax_rows above).
template <class T, class I>
__global__ void embedding_kernel(const T* table, const I* ids, T* out, std::int64_t n, std::int64_t width,
                                 std::int64_t first, std::int64_t rows) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = tokens::embedding_at(table, ids, i, width, first, rows);
}
template <class T, class I>
__global__ void embedding_backward_kernel(T* dtable, const I* ids, const T* g, std::int64_t n, std::int64_t width,
                                          std::int64_t first, std::int64_t rows) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    tokens::embedding_grad_at(dtable, ids, g, i, width, first, rows, [](T* p, T v) { atomicAdd(p, v); });
}
template <class T>
__global__ void causal_mask_kernel(T* scores, std::int64_t n, std::int64_t rows, std::int64_t cols,
                                   std::int64_t first_row) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    tokens::causal_mask_at(scores, i, rows, cols, first_row);
}
template <class T, class I>
__global__ void row_max_sum_exp_and_target_kernel(const T* logits, const I* targets, T* max, T* sum_exp,
                                                  T* target_logit, std::int64_t rows, std::int64_t cols,
                                                  std::int64_t first) {
  for (std::int64_t t = first_index(); t < rows; t += grid_stride())
    tokens::row_max_sum_exp_and_target(logits + t * cols, cols, first, targets[t], max + t, sum_exp + t,
                                       target_logit + t);
}
template <class T>
__global__ void rescale_sum_exp_kernel(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows) {
  for (std::int64_t t = first_index(); t < rows; t += grid_stride())
    sum_exp[t] = tokens::rescaled_sum_exp(sum_exp[t], local_max[t], global_max[t]);
}
template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* logits, const I* targets, const T* max, const T* sum_exp,
                                              const T* scale, T* dlogits, std::int64_t n, std::int64_t cols,
                                              std::int64_t first) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    dlogits[i] = tokens::cross_entropy_grad_at(logits, targets, max, sum_exp, scale, i, cols, first);
}

}  // namespace

template <class T>
void adam_update(T* p, T* m, T* v, T* g, std::int64_t n, const optim::AdamStep& step, cudaStream_t s) {
  if (n <= 0) return;
  adam_update_kernel<<<grid_for(n), block_size, 0, s>>>(p, m, v, g, n, optim::AdamTerms<T>(step), step.clear_grad);
  check_launch("adam_update");
}
template <class T>
void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows, std::int64_t cols,
                  T eps, bool rms, cudaStream_t s) {
  if (rows <= 0) return;
  norm_forward_kernel<<<grid_for(rows), block_size, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps, rms);
  check_launch("norm forward");
}
template <class T>
void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, std::int64_t rows,
                         std::int64_t cols, bool rms, cudaStream_t s) {
  if (rows <= 0) return;
  norm_backward_input_kernel<<<grid_for(rows), block_size, 0, s>>>(x, w, g, mean, rstd, dx, rows, cols, rms);
  check_launch("norm backward (input)");
}
template <class T>
void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db, std::int64_t rows,
                          std::int64_t cols, cudaStream_t s) {
  if (cols <= 0) return;
  norm_backward_weight_kernel<<<grid_for(cols), block_size, 0, s>>>(x, g, mean, rstd, dw, db, rows, cols);
  check_launch("norm backward (weight)");
}

template <class T, class I>
void embedding(const T* table, const I* ids, T* out, std::int64_t tokens, std::int64_t width, std::int64_t first,
               std::int64_t rows, cudaStream_t s) {
  if (tokens * width <= 0) return;
  embedding_kernel<<<grid_for(tokens * width), block_size, 0, s>>>(table, ids, out, tokens * width, width, first, rows);
  check_launch("embedding");
}
template <class T, class I>
void embedding_backward(T* dtable, const I* ids, const T* g, std::int64_t tokens, std::int64_t width,
                        std::int64_t first, std::int64_t rows, cudaStream_t s) {
  if (tokens * width <= 0 || rows <= 0) return;
  embedding_backward_kernel<<<grid_for(tokens * width), block_size, 0, s>>>(dtable, ids, g, tokens * width, width,
                                                                            first, rows);
  check_launch("embedding backward");
}
template <class T>
void causal_mask(T* scores, std::int64_t blocks, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                 cudaStream_t s) {
  const std::int64_t n = blocks * rows * cols;
  if (n <= 0) return;
  causal_mask_kernel<<<grid_for(n), block_size, 0, s>>>(scores, n, rows, cols, first_row);
  check_launch("causal_mask");
}
template <class T, class I>
void row_max_sum_exp_and_target(const T* logits, const I* targets, T* max, T* sum_exp, T* target_logit,
                                std::int64_t rows, std::int64_t cols, std::int64_t first, cudaStream_t s) {
  if (rows <= 0) return;
  row_max_sum_exp_and_target_kernel<<<grid_for(rows), block_size, 0, s>>>(logits, targets, max, sum_exp, target_logit,
                                                                          rows, cols, first);
  check_launch("row_max_sum_exp_and_target");
}
template <class T>
void rescale_sum_exp(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows, cudaStream_t s) {
  if (rows <= 0) return;
  rescale_sum_exp_kernel<<<grid_for(rows), block_size, 0, s>>>(sum_exp, local_max, global_max, rows);
  check_launch("rescale_sum_exp");
}
template <class T, class I>
void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                            T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first, cudaStream_t s) {
  if (rows * cols <= 0) return;
  cross_entropy_backward_kernel<<<grid_for(rows * cols), block_size, 0, s>>>(logits, targets, max, sum_exp, scale,
                                                                             dlogits, rows * cols, cols, first);
  check_launch("cross_entropy backward");
}

template <class T>
void fill(T* p, std::int64_t n, T v, cudaStream_t s) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), block_size, 0, s>>>(p, n, v);
  check_launch("fill");
}
template <class T>
void axpy(std::int64_t n, T alpha, const T* x, T* y, cudaStream_t s) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n), block_size, 0, s>>>(n, alpha, x, y);
  check_launch("axpy");
}
template <class T>
void scale_matrices(T* c, std::int64_t m, std::int64_t n, std::int64_t ld, std::int64_t stride, std::int64_t batch,
                    T beta, cudaStream_t s) {
  if (m <= 0 || n <= 0 || batch <= 0 || beta == T(1)) return;
  scale_matrices_kernel<<<grid_for(batch * m * n), block_size, 0, s>>>(c, m, n, ld, stride, batch, beta);
  check_launch("scale_matrices");
}
template <class T>
void sum(const T* x, std::int64_t n, T* out, cudaStream_t s) {
  sum_kernel<<<1, block_size, 0, s>>>(x, n, out);  // n == 0 writes 0
  check_launch("sum");
}
template <class T>
void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows * cols <= 0) return;
  transpose_kernel<<<grid_for(rows * cols), block_size, 0, s>>>(in, out, rows, cols);
  check_launch("transpose_2d");
}
template <class T>
void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner, cudaStream_t s) {
  if (outer * inner <= 0) return;
  sum_middle_kernel<<<grid_for(outer * inner), block_size, 0, s>>>(in, out, outer, extent, inner);
  check_launch("sum_middle");
}
template <class T>
void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner, cudaStream_t s) {
  if (outer * extent * inner <= 0) return;
  broadcast_middle_kernel<<<grid_for(outer * extent * inner), block_size, 0, s>>>(g, out, outer, extent, inner);
  check_launch("broadcast_middle");
}
template <class T>
void softmax_rows(T* x, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  softmax_rows_kernel<<<grid_for(rows), block_size, 0, s>>>(x, rows, cols);
  check_launch("softmax_rows");
}
template <class T>
void softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  softmax_backward_kernel<<<grid_for(rows), block_size, 0, s>>>(p, dp, rows, cols, scale);
  check_launch("softmax_backward_rows");
}
template <class T>
void fused_forward(const FusedProgram<T>& program, T* out, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  fused_forward_kernel<<<grid_for(n), block_size, 0, s>>>(program, out, n);
  check_launch("fused element-wise pass");
}
template <class T>
void fused_backward(const FusedProgram<T>& program, const T* g, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  fused_backward_kernel<<<grid_for(n), block_size, 0, s>>>(program, g, n);
  check_launch("fused element-wise backward pass");
}

#define SHARDEX_INSTANTIATE(T)                                                                                 \
  template void fill<T>(T*, std::int64_t, T, cudaStream_t);                                                    \
  template void axpy<T>(std::int64_t, T, const T*, T*, cudaStream_t);                                          \
  template void scale_matrices<T>(T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, T, \
                                  cudaStream_t);                                                               \
  template void sum<T>(const T*, std::int64_t, T*, cudaStream_t);                                              \
  template void transpose_2d<T>(const T*, T*, std::int64_t, std::int64_t, cudaStream_t);                       \
  template void sum_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);           \
  template void broadcast_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);     \
  template void softmax_rows<T>(T*, std::int64_t, std::int64_t, cudaStream_t);                                 \
  template void softmax_backward_rows<T>(const T*, T*, std::int64_t, std::int64_t, T, cudaStream_t);           \
  template void fused_forward<T>(const FusedProgram<T>&, T*, std::int64_t, cudaStream_t);                      \
  template void fused_backward<T>(const FusedProgram<T>&, const T*, std::int64_t, cudaStream_t);

SHARDEX_INSTANTIATE(float)
SHARDEX_INSTANTIATE(double)
#undef SHARDEX_INSTANTIATE

#define SHARDEX_INSTANTIATE_TOKENS(T, I)                                                                         \
  template void embedding<T, I>(const T*, const I*, T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,  \
                                cudaStream_t);                                                                   \
  template void embedding_backward<T, I>(T*, const I*, const T*, std::int64_t, std::int64_t, std::int64_t,       \
                                         std::int64_t, cudaStream_t);                                            \
  template void row_max_sum_exp_and_target<T, I>(const T*, const I*, T*, T*, T*, std::int64_t, std::int64_t,     \
                                                 std::int64_t, cudaStream_t);                                    \
  template void cross_entropy_backward<T, I>(const T*, const I*, const T*, const T*, const T*, T*, std::int64_t, \
                                             std::int64_t, std::int64_t, cudaStream_t);

SHARDEX_INSTANTIATE_TOKENS(float, std::int32_t)
SHARDEX_INSTANTIATE_TOKENS(float, std::int64_t)
SHARDEX_INSTANTIATE_TOKENS(double, std::int32_t)
SHARDEX_INSTANTIATE_TOKENS(double, std::int64_t)
#undef SHARDEX_INSTANTIATE_TOKENS
#define SHARDEX_INSTANTIATE_NORMS(T)                                                                                \
  template void norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t, std::int64_t, T, bool,      \
                                cudaStream_t);                                                                      \
  template void norm_backward_input<T>(const T*, const T*, const T*, const T*, const T*, T*, std::int64_t,          \
                                       std::int64_t, bool, cudaStream_t);                                           \
  template void norm_backward_weight<T>(const T*, const T*, const T*, const T*, T*, T*, std::int64_t, std::int64_t, \
                                        cudaStream_t);
template void adam_update<float>(float*, float*, float*, float*, std::int64_t, const optim::AdamStep&, cudaStream_t);
template void adam_update<double>(double*, double*, double*, double*, std::int64_t, const optim::AdamStep&,
                                  cudaStream_t);
SHARDEX_INSTANTIATE_NORMS(float)
SHARDEX_INSTANTIATE_NORMS(double)
#undef SHARDEX_INSTANTIATE_NORMS
template void causal_mask<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);
template void causal_mask<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);
template void rescale_sum_exp<float>(float*, const float*, const float*, std::int64_t, cudaStream_t);
template void rescale_sum_exp<double>(double*, const double*, const double*, std::int64_t, cudaStream_t);

}  // namespace shardex::cuda::kernels
