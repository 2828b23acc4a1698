// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `BackendCallRecorder`: while one is alive on a thread, every call
/// that thread makes to a communication backend (MPI, NCCL, or the one-rank
/// world) is appended to it, with the bytes this rank hands the backend to
/// send. It is how the tests prove that what runs is what `explain` said,
/// from the calls themselves rather than from the plan, and how a user sees
/// the calls a step makes.
///
/// @code
/// BackendCallRecorder rec;
/// Tensor<float, Replicated> y = all_gather(x);
/// rec.calls();   // {all_gather_v, 240 B}, after the agreement's {agreement, 0 B}
/// @endcode
///
/// Bytes handed to send: a collective's send buffer (all of it for a
/// reduce-scatter or an all-to-all), a broadcast's buffer on its root only, a
/// send's buffer; a receive hands nothing. Off (no recorder), a call costs
/// one thread-local read.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "shardex/core/strided_block.hpp"

namespace shardex {

/// One call to a communication backend, as a BackendCallRecorder saw it.
struct BackendCall {
  /// all_gather, all_gather_v, reduce_scatter, reduce_scatter_v, all_reduce, all_reduce_max,
  /// all_to_all, all_to_all_v, exchange_blocks, broadcast, reduce, send, recv,
  /// or agreement (the cross-rank check before a collective, core/agree.hpp).
  const char* primitive = "";
  /// The bytes this rank handed the backend to send (see the file's note).
  std::int64_t bytes = 0;
};

class BackendCallRecorder;

namespace detail {
inline BackendCallRecorder*& active_recorder() noexcept {
  static thread_local BackendCallRecorder* r = nullptr;
  return r;
}
}  // namespace detail

/// Records the backend calls of this thread while alive (see the file's note).
class BackendCallRecorder {
public:
  /// Records this thread's backend calls until destroyed (recorders nest: the
  /// innermost one records).
  BackendCallRecorder() noexcept : outer_(std::exchange(detail::active_recorder(), this)) {}
  BackendCallRecorder(const BackendCallRecorder&) = delete;
  BackendCallRecorder& operator=(const BackendCallRecorder&) = delete;
  ~BackendCallRecorder() { detail::active_recorder() = outer_; }

  /// The calls so far, in order.
  [[nodiscard]] const std::vector<BackendCall>& calls() const noexcept { return calls_; }
  /// Appends a call (what each backend primitive does through the active recorder).
  void add(const char* primitive, std::int64_t bytes) { calls_.push_back({primitive, bytes}); }

private:
  std::vector<BackendCall> calls_;
  BackendCallRecorder* outer_;
};

namespace detail {
/// Called by each backend primitive (src/*_communicator.cpp).
inline void record_backend_call(const char* primitive, std::int64_t bytes) {
  if (BackendCallRecorder* r = active_recorder()) r->add(primitive, bytes);
}
/// Elements of a list of counts, or of blocks (a v-collective's send side).
inline std::int64_t elements_of(std::span<const std::int64_t> counts) noexcept {
  std::int64_t n = 0;
  for (auto c : counts) n += c;
  return n;
}
inline std::int64_t elements_of(std::span<const StridedBlock> blocks) noexcept {
  std::int64_t n = 0;
  for (const auto& b : blocks) n += b.count();
  return n;
}
}  // namespace detail

}  // namespace shardex
