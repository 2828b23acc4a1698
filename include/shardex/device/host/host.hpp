// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The `Host` device: tensors in host memory, local math through Eigen,
/// communication through MPI. A model of `Device` (device/device.hpp): the
/// primitives every lowering plan needs (allocate, zero, copy a block of a
/// strided array) and the local math of the expression nodes; the Cuda device
/// provides the same set with cuBLAS and kernels.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/device/device.hpp"
#include "shardex/device/host/gemm_kernels.hpp"
#include "shardex/device/host/memory_pool.hpp"
#include "shardex/device/host/threads.hpp"
#include "shardex/device/norm_ops.hpp"
#include "shardex/device/optimizer_ops.hpp"
#include "shardex/device/token_ops.hpp"

namespace shardex {

/// @brief The host device: tensors in host memory, math through Eigen and
/// plain loops, collectives through the MPI communicator.
struct Host {
  ///@{
  /// The communicator its tensors' collectives go through, and its name in messages.
  using communicator = mpi::Communicator;
  static constexpr const char* name = "host";
  ///@}
  /// Fused element-wise trees run as an inlined template loop.
  static constexpr bool fused_on_host = true;

  /// Uninitialized storage of n elements (at least one, so that an empty
  /// local part still has a distinct pointer), from the host memory pool
  /// (device/host/memory_pool.hpp): for buffers the caller overwrites whole.
  template <class T>
  static std::shared_ptr<T[]> allocate_uninitialized(std::int64_t n) {
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T);
    return std::shared_ptr<T[]>(static_cast<T*>(host::pool_acquire(bytes)),
                                [bytes](T* p) { host::pool_give_back(p, bytes); });
  }

  /// Zero-initialized storage of n elements (pooled as above).
  template <class T>
  static std::shared_ptr<T[]> allocate(std::int64_t n) {
    auto p = allocate_uninitialized<T>(n);
    std::memset(p.get(), 0, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T));
    detail::counters_ref().bytes_zeroed += std::max<std::int64_t>(n, 0) * static_cast<std::int64_t>(sizeof(T));
    return p;
  }

  /// Sets n elements to v.
  template <class T>
  static void fill(T* p, std::int64_t n, T v) {
    std::fill(p, p + n, v);
  }

  /// Host <-> device copies: on the host, plain copies.
  template <class T>
  static void upload(T* dst, const T* src, std::int64_t n) {
    if (n <= 0) return;
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    detail::counters_ref().bytes_copied += n * static_cast<std::int64_t>(sizeof(T));
  }
  /// The same copy as upload.
  template <class T>
  static void download(T* dst, const T* src, std::int64_t n) {
    upload(dst, src, n);
  }

  /// y += alpha * x over n elements.
  template <class T>
  static void axpy(std::int64_t n, T alpha, const T* x, T* y) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  /// The sum of n elements (pairwise through Eigen's reduction; float and
  /// double, compiled into the library: src/instances.cpp).
  template <class T>
  static T sum(const T* x, std::int64_t n);

  /// Copies block `from` of src to block `to` of dst (the same rows and run;
  /// strides may differ). One memcpy when the block is contiguous in both.
  template <class T>
  static void copy(const T* src, const StridedBlock& from, T* dst, const StridedBlock& to) {
    const std::int64_t n = from.count();
    if (n == 0) return;
    detail::counters_ref().bytes_copied += n * static_cast<std::int64_t>(sizeof(T));
    if (from.rows == 1 || (from.stride == from.run && to.stride == to.run)) {
      std::memcpy(dst + to.offset, src + from.offset, static_cast<std::size_t>(n) * sizeof(T));
      return;
    }
    for (std::int64_t r = 0; r < from.rows; ++r)
      std::memcpy(dst + to.offset + r * to.stride, src + from.offset + r * from.stride,
                  static_cast<std::size_t>(from.run) * sizeof(T));
  }

  /// Batched row-major products (see GemmShape), through Eigen, the BLAS or
  /// shardex's own kernel, whichever was measured fastest for the shape's class
  /// (device/host/gemm_kernels.hpp). Compiled into the library, for float and double.
  template <class T>
  static void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c);
  /// The name of the kernel gemm runs for `g` ("eigen", "openblas"), which explain prints.
  template <class T>
  static const char* gemm_kernel(const GemmShape& g);

  /// out (cols x rows) = in (rows x cols) transposed.
  template <class T>
  static void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }

  /// out (outer, inner) = the sum over the middle dim of in (outer, extent, inner).
  template <class T>
  static void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner);

  /// out (outer, extent, inner) = g (outer, inner) repeated along the middle dim.
  template <class T>
  static void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner);

  /// Each row of s (rows x cols) replaced by its softmax.
  template <class T>
  static void softmax_rows(T* s, std::int64_t rows, std::int64_t cols);

  /// The adjoint of softmax_rows, scaled: dp <- scale * p * (dp - rowsum(dp * p)).
  template <class T>
  static void softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale);

  /// One Adam step over n elements of a parameter, its gradient and moments
  /// (optim::adam_update_at, vectorized in src/host_passes.cpp; the Cuda
  /// device runs it as one fused kernel); g is left zero with s.clear_grad.
  template <class T>
  static void adam_update(T* p, T* m, T* v, T* g, std::int64_t n, const optim::AdamStep& s);

  ///@{
  /// Layer norm and RMS norm over the last dim of x (rows x cols): the forward
  /// with each row's mean and rstd kept for the backward, the input's
  /// gradient, the weight's and bias's (db may be null). The formulas are the
  /// row and column functions of device/norm_ops.hpp (the Cuda device runs
  /// those in kernels); here they run over whole rows in vector-register loops
  /// (src/host_passes.cpp), and the weight's gradient adds rows (the fused
  /// backward four at a time) instead of walking columns (a scalar loop over
  /// columns was 40x the memory-bandwidth floor).
  template <class T>
  static void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                           std::int64_t cols, T eps, bool rms);
  template <class T>
  static void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                                  std::int64_t rows, std::int64_t cols, bool rms);
  /// The input's, the weight's and the bias's gradients in one pass over the
  /// rows (each row read once from memory; db may be null): what
  /// norm_backward_input and norm_backward_weight compute, as nn/norm.hpp runs
  /// it on a device that has it. With add_to_dx, dx += the input's gradient
  /// (into a gradient that already holds another contribution: the residual
  /// stream's, with no fresh storage and no second pass adding it).
  template <class T>
  static void norm_backward_fused(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                                  std::int64_t rows, std::int64_t cols, bool rms, bool add_to_dx = false);
  template <class T>
  static void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db,
                                   std::int64_t rows, std::int64_t cols);
  ///@}

  ///@{
  /// The token layers' loops over the element and row functions of
  /// device/token_ops.hpp (the Cuda device runs the same functions in kernels):
  /// embedding's lookup into out (tokens x width) and its scatter-add into
  /// dtable; cross-entropy's row max, its packed (sum of exp, target logit)
  /// pair per row, and its logit gradient; attention's causal mask over
  /// `blocks` (rows x cols) score blocks whose first row is query
  /// `first_row` (tokens::causal_mask_at). `first` is the global index of the
  /// rank's first table row or logit column.
  template <class T, class I>
  static void embedding(const T* table, const I* ids, T* out, std::int64_t tokens, std::int64_t width,
                        std::int64_t first, std::int64_t rows) {
    for (std::int64_t i = 0; i < tokens * width; ++i) out[i] = tokens::embedding_at(table, ids, i, width, first, rows);
  }
  template <class T, class I>
  static void embedding_backward(T* dtable, const I* ids, const T* g, std::int64_t tokens, std::int64_t width,
                                 std::int64_t first, std::int64_t rows) {
    for (std::int64_t i = 0; i < tokens * width; ++i)
      tokens::embedding_grad_at(dtable, ids, g, i, width, first, rows, [](T* p, T v) { *p += v; });
  }
  template <class T>
  static void causal_mask(T* scores, std::int64_t blocks, std::int64_t rows, std::int64_t cols, std::int64_t first_row);
  template <class T, class I>
  static void row_max_sum_exp_and_target(const T* logits, const I* targets, T* max, T* sum_exp, T* target_logit,
                                         std::int64_t rows, std::int64_t cols, std::int64_t first);
  template <class T>
  static void rescale_sum_exp(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows);
  template <class T, class I>
  static void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                     T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first);
  ///@}
};

static_assert(Device<Host>);
static_assert(CollectiveBackend<mpi::Communicator>);

// Compiled once into the library (src/instances.cpp, src/host_gemm.cpp,
// src/host_passes.cpp, at the library's optimization: a test program built at
// -O0 runs them as fast as a user's): the product and reduction kernels are
// the heaviest code a translation unit would otherwise compile for itself, and
// Eigen, which they use, is then parsed only where a user asks for it
// (Tensor::array, tensor/eigen_array.hpp).
extern template void Host::gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
extern template void Host::gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);
extern template const char* Host::gemm_kernel<float>(const GemmShape&);
extern template const char* Host::gemm_kernel<double>(const GemmShape&);
extern template float Host::sum<float>(const float*, std::int64_t);
extern template double Host::sum<double>(const double*, std::int64_t);

}  // namespace shardex
