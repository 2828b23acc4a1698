// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Counters of what the library did on this thread: bytes copied by
/// local block copies, bytes zero-filled, backend calls and the wall time
/// spent in them, cross-rank agreements. They make the "no copy the raw call
/// would not make" promise testable (test/unit/test_copies.cpp) and split a
/// training step into compute and communication (bench/mlp_step.cpp).
///
/// @code
/// const auto before = shardex::counters();
/// Tensor<float, Replicated> y = all_gather(x);
/// const auto moved = shardex::counters() - before;   // moved.bytes_copied == 0 for a dim-0 shard
/// @endcode
///
/// Counting costs a few additions per call; the timing two clock reads per
/// backend call (tens of nanoseconds against microseconds of communication).

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

  /// The difference of two snapshots, field by field.
  friend Counters operator-(Counters a, const Counters& b) {
    a.bytes_copied -= b.bytes_copied;
    a.bytes_zeroed -= b.bytes_zeroed;
    a.backend_calls -= b.backend_calls;
    a.agreements -= b.agreements;
    a.backend_seconds -= b.backend_seconds;
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
}  // namespace detail

/// A snapshot of this thread's counters (subtract two snapshots for a span).
inline Counters counters() noexcept { return detail::counters_ref(); }

}  // namespace shardex
