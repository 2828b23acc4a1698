// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Counters of what the library did on this thread: bytes copied by
/// local block copies, bytes zero-filled, backend calls and the wall time
/// spent in them, cross-rank agreements, the host's matrix products with their
/// flops and wall time. They make the "no copy the raw call would not make"
/// promise testable (test/unit/test_copies.cpp) and split a training step
/// into products, communication and the rest (bench/mlp_step.cpp,
/// bench/gpt2_step.cpp).
///
/// @code
/// const auto before = shardex::counters();
/// Tensor<float, Replicated> y = all_gather(x);
/// const auto moved = shardex::counters() - before;   // moved.bytes_copied == 0 for a dim-0 shard
/// @endcode
///
/// Counting costs a few additions per call; the timing two clock reads per
/// backend call or host product (tens of nanoseconds against the microseconds
/// of the smallest product a model makes, attention's 64^3).

#include <chrono>
#include <cstdint>

namespace shardex {

/// What this thread has done so far; subtract two snapshots (counters()) for a span.
struct Counters {
  std::int64_t bytes_copied = 0;   ///< local copies of tensor data (Device::copy, clone, upload, download)
  std::int64_t bytes_zeroed = 0;   ///< zero-filled storage (Tensor::zeros, a zeroed allocation)
  std::int64_t backend_calls = 0;  ///< collective / grouped calls issued to the backend (agreements included)
  std::int64_t agreements = 0;     ///< cross-rank agreements before a collective (core/agree.hpp)
  double backend_seconds = 0;      ///< wall time inside backend calls (communication and waiting for peers)
  std::int64_t gemm_calls = 0;     ///< host matrix products (Host::gemm, host::gemm_with; a batch counts once)
  double gemm_flops = 0;           ///< their flops, 2 m n k per product of the batch
  double gemm_seconds = 0;         ///< wall time inside them

  /// The difference of two snapshots, field by field.
  friend Counters operator-(Counters a, const Counters& b) {
    a.bytes_copied -= b.bytes_copied;
    a.bytes_zeroed -= b.bytes_zeroed;
    a.backend_calls -= b.backend_calls;
    a.agreements -= b.agreements;
    a.backend_seconds -= b.backend_seconds;
    a.gemm_calls -= b.gemm_calls;
    a.gemm_flops -= b.gemm_flops;
    a.gemm_seconds -= b.gemm_seconds;
    return a;
  }
};

namespace detail {
inline Counters& counters_ref() noexcept {
  static thread_local Counters c;
  return c;
}

/// Adds the wall time of its scope to backend_seconds and one to backend_calls.
class BackendTimer {
public:
  BackendTimer() noexcept : t0_(std::chrono::steady_clock::now()) {}
  BackendTimer(const BackendTimer&) = delete;
  BackendTimer& operator=(const BackendTimer&) = delete;
  ~BackendTimer() {
    auto& c = counters_ref();
    ++c.backend_calls;
    c.backend_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

private:
  std::chrono::steady_clock::time_point t0_;
};

/// Adds one host matrix product of `flops` and the wall time of its scope to
/// the gemm counters: what a step spends in its products against its GEMM
/// floor (bench/gpt2_step.cpp).
class GemmTimer {
public:
  explicit GemmTimer(double flops) noexcept : flops_(flops), t0_(std::chrono::steady_clock::now()) {}
  GemmTimer(const GemmTimer&) = delete;
  GemmTimer& operator=(const GemmTimer&) = delete;
  ~GemmTimer() {
    auto& c = counters_ref();
    ++c.gemm_calls;
    c.gemm_flops += flops_;
    c.gemm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

private:
  double flops_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace detail

/// A snapshot of this thread's counters (subtract two snapshots for a span).
inline Counters counters() noexcept { return detail::counters_ref(); }

}  // namespace shardex
