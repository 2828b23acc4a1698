// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The `Cuda` device: tensors in GPU memory (cudaMalloc, RAII through
/// the tensor's shared storage; never managed memory), local math through
/// cuBLAS and the kernels of cuda/kernels.hpp, communication through NCCL.
/// A model of `Device` (device/device.hpp), like `Host`: every expression node
/// and every lowering plan runs on it unchanged.
///
/// @code
/// auto nccl = nccl::Communicator::create(mpi::Communicator::world());
/// auto w = to<Cuda>(Tensor<float, Sharded<1>>::normal(world, {512, 2048}, seed), nccl);
/// Tensor<float, Replicated, Cuda> full = all_gather(w);   // ncclAllGather or its uneven plan
/// @endcode
///
/// Everything is ordered on the compute stream (cuda/runtime.hpp); functions
/// that return a host value (`sum`, `download`) wait for it.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "shardex/backend/nccl/communicator.hpp"
#include "shardex/device/cuda/blas.hpp"
#include "shardex/device/cuda/kernels.hpp"
#include "shardex/device/cuda/runtime.hpp"
#include "shardex/device/device.hpp"
#include "shardex/device/fused_program.hpp"

namespace shardex {

/// @brief The CUDA device: tensors in GPU memory, math through cuBLAS and
/// shardex's kernels on the compute stream, collectives through NCCL.
struct Cuda {
  ///@{
  /// The communicator its tensors' collectives go through, and its name in messages.
  using communicator = nccl::Communicator;
  static constexpr const char* name = "cuda";
  ///@}
  /// Fused element-wise trees run as a FusedProgram in one kernel.
  static constexpr bool fused_on_host = false;

  /// Uninitialized device storage of n elements (at least one, so that an
  /// empty local part still has a distinct, valid pointer).
  template <class T>
  static std::shared_ptr<T[]> allocate_uninitialized(std::int64_t n) {
    const auto bytes = static_cast<std::size_t>(n > 0 ? n : 1) * sizeof(T);
    void* p = nullptr;
    cuda::check(cudaMalloc(&p, bytes), "cudaMalloc");
    return std::shared_ptr<T[]>(static_cast<T*>(p), [](T* q) { cudaFree(q); });
  }

  /// Zero-initialized device storage of n elements.
  template <class T>
  static std::shared_ptr<T[]> allocate(std::int64_t n) {
    auto owned = allocate_uninitialized<T>(n);
    const auto bytes = static_cast<std::size_t>(n > 0 ? n : 1) * sizeof(T);
    cuda::check(cudaMemsetAsync(owned.get(), 0, bytes, cuda::compute_stream()), "cudaMemsetAsync");
    return owned;
  }

  /// Sets n elements to v.
  template <class T>
  static void fill(T* p, std::int64_t n, T v) {
    cuda::kernels::fill(p, n, v, cuda::compute_stream());
  }

  /// y += alpha * x over n elements.
  template <class T>
  static void axpy(std::int64_t n, T alpha, const T* x, T* y) {
    cuda::kernels::axpy(n, alpha, x, y, cuda::compute_stream());
  }

  /// The sum of n elements, returned to the host (waits for it).
  template <class T>
  static T sum(const T* x, std::int64_t n) {
    auto out = allocate<T>(1);
    cuda::kernels::sum(x, n, out.get(), cuda::compute_stream());
    T v{};
    cuda::copy_to_host(&v, out.get(), sizeof(T));
    return v;
  }

  /// The block copy of the lowering plans (pad, unpad, slice, pack and unpack
  /// of strided shards): block `from` of src to block `to` of dst (the same
  /// rows and run). One copy when the block is contiguous in both arrays, else
  /// one 2-d copy (rows of `run` elements with the two strides as pitches), or
  /// one copy per row where a pitch exceeds what cudaMemcpy2D accepts.
  template <class T>
  static void copy(const T* src, const StridedBlock& from, T* dst, const StridedBlock& to) {
    if (from.count() == 0) return;
    const auto bytes = [](std::int64_t elems) { return static_cast<std::size_t>(elems) * sizeof(T); };
    const T* s = src + from.offset;
    T* d = dst + to.offset;
    if (from.rows == 1 || (from.stride == from.run && to.stride == to.run)) {
      cuda::check(cudaMemcpyAsync(d, s, bytes(from.count()), cudaMemcpyDeviceToDevice, cuda::compute_stream()),
                  "cudaMemcpyAsync (copy)");
      return;
    }
    const std::size_t spitch = bytes(from.stride), dpitch = bytes(to.stride);
    if (std::max(spitch, dpitch) <= cuda::max_pitch()) {
      cuda::check(cudaMemcpy2DAsync(d, dpitch, s, spitch, bytes(from.run), static_cast<std::size_t>(from.rows),
                                    cudaMemcpyDeviceToDevice, cuda::compute_stream()),
                  "cudaMemcpy2DAsync (copy)");
      return;
    }
    for (std::int64_t r = 0; r < from.rows; ++r)
      cuda::check(cudaMemcpyAsync(d + r * to.stride, s + r * from.stride, bytes(from.run), cudaMemcpyDeviceToDevice,
                                  cuda::compute_stream()),
                  "cudaMemcpyAsync (copy, one row)");
  }

  ///@{
  /// Host -> device and device -> host copies of n elements.
  template <class T>
  static void upload(T* dst, const T* src, std::int64_t n) {
    cuda::copy_to_device(dst, src, n * static_cast<std::int64_t>(sizeof(T)));
  }
  template <class T>
  static void download(T* dst, const T* src, std::int64_t n) {
    cuda::copy_to_host(dst, src, n * static_cast<std::int64_t>(sizeof(T)));
  }
  ///@}

  ///@{
  /// The `Device` primitives (device/device.hpp), as kernels on the compute
  /// stream: gemm through cuBLAS, transpose, sum and broadcast over one dim,
  /// the row softmax and its backward, the fused pass.
  template <class T>
  static void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
    cuda::gemm(g, alpha, a, b, beta, c);
  }
  /// The kernel gemm runs (explain prints it).
  template <class T>
  static const char* gemm_kernel(const GemmShape& /*g*/) {
    return "cublas";
  }
  template <class T>
  static void transpose_2d(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
    cuda::kernels::transpose_2d(in, out, rows, cols, cuda::compute_stream());
  }
  template <class T>
  static void sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    // One output (sum over everything): one block's reduction, not one thread's loop.
    if (outer * inner == 1)
      cuda::kernels::sum(in, extent, out, cuda::compute_stream());
    else
      cuda::kernels::sum_middle(in, out, outer, extent, inner, cuda::compute_stream());
  }
  template <class T>
  static void broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
    cuda::kernels::broadcast_middle(g, out, outer, extent, inner, cuda::compute_stream());
  }
  template <class T>
  static void softmax_rows(T* s, std::int64_t rows, std::int64_t cols) {
    cuda::kernels::softmax_rows(s, rows, cols, cuda::compute_stream());
  }
  template <class T>
  static void softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale) {
    cuda::kernels::softmax_backward_rows(p, dp, rows, cols, scale, cuda::compute_stream());
  }
  template <class T>
  static void adam_update(T* p, T* m, T* v, T* g, std::int64_t n, const optim::AdamStep& step) {
    cuda::kernels::adam_update(p, m, v, g, n, step, cuda::compute_stream());
  }
  template <class T>
  static void norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                           std::int64_t cols, T eps, bool rms) {
    cuda::kernels::norm_forward(x, w, b, y, mean, rstd, rows, cols, eps, rms, cuda::compute_stream());
  }
  template <class T>
  static void norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                                  std::int64_t rows, std::int64_t cols, bool rms) {
    cuda::kernels::norm_backward_input(x, w, g, mean, rstd, dx, rows, cols, rms, cuda::compute_stream());
  }
  template <class T>
  static void norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db,
                                   std::int64_t rows, std::int64_t cols) {
    cuda::kernels::norm_backward_weight(x, g, mean, rstd, dw, db, rows, cols, cuda::compute_stream());
  }
  template <class T, class I>
  static void embedding(const T* table, const I* ids, T* out, std::int64_t tokens, std::int64_t width,
                        std::int64_t first, std::int64_t rows) {
    cuda::kernels::embedding(table, ids, out, tokens, width, first, rows, cuda::compute_stream());
  }
  template <class T, class I>
  static void embedding_backward(T* dtable, const I* ids, const T* g, std::int64_t tokens, std::int64_t width,
                                 std::int64_t first, std::int64_t rows) {
    cuda::kernels::embedding_backward(dtable, ids, g, tokens, width, first, rows, cuda::compute_stream());
  }
  template <class T>
  static void causal_mask(T* scores, std::int64_t blocks, std::int64_t rows, std::int64_t cols,
                          std::int64_t first_row) {
    cuda::kernels::causal_mask(scores, blocks, rows, cols, first_row, cuda::compute_stream());
  }
  template <class T, class I>
  static void row_max_sum_exp_and_target(const T* logits, const I* targets, T* max, T* sum_exp, T* target_logit,
                                         std::int64_t rows, std::int64_t cols, std::int64_t first) {
    cuda::kernels::row_max_sum_exp_and_target(logits, targets, max, sum_exp, target_logit, rows, cols, first,
                                              cuda::compute_stream());
  }
  template <class T>
  static void rescale_sum_exp(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows) {
    cuda::kernels::rescale_sum_exp(sum_exp, local_max, global_max, rows, cuda::compute_stream());
  }
  template <class T, class I>
  static void cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                     T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first) {
    cuda::kernels::cross_entropy_backward(logits, targets, max, sum_exp, scale, dlogits, rows, cols, first,
                                          cuda::compute_stream());
  }
  template <class T>
  static void fused_forward(const FusedProgram<T>& program, T* out, std::int64_t n) {
    cuda::kernels::fused_forward(program, out, n, cuda::compute_stream());
  }
  template <class T>
  static void fused_backward(const FusedProgram<T>& program, const T* g, std::int64_t n) {
    cuda::kernels::fused_backward(program, g, n, cuda::compute_stream());
  }
  ///@}
};

static_assert(Device<Cuda>);
static_assert(CollectiveBackend<nccl::Communicator>);

}  // namespace shardex
