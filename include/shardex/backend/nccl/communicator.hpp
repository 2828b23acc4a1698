// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `shardex::nccl::Communicator`: a shared RAII handle to an NCCL
/// communicator, bootstrapped over an MPI communicator, with the primitives
/// every lowering plan is built from (the same set as mpi::Communicator).
///
/// **Concept `CollectiveBackend`** (lower/backend.hpp). Models: this class.
/// NCCL has no v collectives, so `has_v_collectives` is false: uneven shards
/// go through the padded, per-root and send/receive plans, and asking for
/// `strategy::v_collective` on a Cuda tensor is a compile error.
///
/// Bootstrap: rank 0 of the control communicator calls ncclGetUniqueId, MPI
/// broadcasts it, every rank calls ncclCommInitRankConfig on the GPU picked
/// from its node-local rank. A one-rank control communicator (including a
/// build without MPI) needs no broadcast at all.
///
/// Failure: the communicator is non-blocking, and every call waits for its
/// work with a watchdog: an NCCL error, or no progress within the timeout
/// (a peer that never made the matching call), aborts the communicator with
/// ncclCommAbort and throws `backend_error` naming the call, the rank and
/// the reason, instead of hanging. After an abort every call throws.
///
/// Streams: the communicator has its own stream. Each call first makes it wait
/// for the compute stream (cuda/runtime.hpp), then waits for its own work to
/// finish, so the buffers a call hands over are ready and may be reused as
/// soon as it returns.

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardex/backend/mpi/communicator.hpp"

namespace shardex::nccl {

/// The NCCL datatype of T (float, double, int64_t).
template <class T>
constexpr ncclDataType_t datatype();
///@{
/// ncclFloat32, ncclFloat64, ncclInt64.
template <>
constexpr ncclDataType_t datatype<float>() {
  return ncclFloat32;
}
template <>
constexpr ncclDataType_t datatype<double>() {
  return ncclFloat64;
}
template <>
constexpr ncclDataType_t datatype<std::int64_t>() {
  return ncclInt64;
}
///@}

/// How Communicator::create sets a communicator up.
struct Options {
  /// The GPU of this rank; -1 picks the node-local rank's GPU.
  int device = -1;
  /// How long a call may make no progress before the communicator is aborted.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

class Communicator;

/// Why an NCCL communicator over the ranks of `control` cannot start here, or
/// empty if it can: no usable GPU (CUDA's own error, or none visible), or more
/// ranks on a node than GPUs (NCCL refuses two ranks on one GPU). Collective
/// over `control`; every rank gets a non-empty answer if any rank has one.
std::string unavailable_reason(const mpi::Communicator& control);

/// Rooted and point-to-point calls issued between ncclGroupStart and
/// ncclGroupEnd, completed together by `end()`. Pieces of count 0 are skipped
/// on both sides (NCCL would still queue a zero-length send or receive, and
/// the plans decide the counts identically on every rank).
class Group {
public:
  /// A group of calls on communicator c (which must outlive it).
  explicit Group(const Communicator& c);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  /// Ends the group if `end()` was not called (errors are then swallowed);
  /// left by an exception, it aborts the communicator instead (the peers would
  /// wait for calls this rank never finished issuing).
  ~Group();

  /// root's `buf` into every rank's `buf` (device memory).
  template <class T>
  void broadcast(T* buf, std::int64_t count, int root) {
    broadcast_raw(buf, count, datatype<T>(), root);
  }
  /// Sum of every rank's `send` into `recv` on `root`.
  template <class T>
  void reduce(const T* send, T* recv, std::int64_t count, int root) {
    reduce_raw(send, recv, count, datatype<T>(), root);
  }
  /// `count` elements of `buf` to rank `peer`.
  template <class T>
  void send(const T* buf, std::int64_t count, int peer) {
    send_raw(buf, count, datatype<T>(), peer);
  }
  /// `count` elements from rank `peer` into `buf`.
  template <class T>
  void recv(T* buf, std::int64_t count, int peer) {
    recv_raw(buf, count, datatype<T>(), peer);
  }
  /// Ends the group (ncclGroupEnd) and waits for its calls.
  /// @throws backend_error if NCCL fails (the communicator is then aborted).
  void end();

private:
  void broadcast_raw(void* buf, std::int64_t count, ncclDataType_t t, int root);
  void reduce_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t, int root);
  void send_raw(const void* buf, std::int64_t count, ncclDataType_t t, int peer);
  void recv_raw(void* buf, std::int64_t count, ncclDataType_t t, int peer);
  void check_peer(int peer, const char* what) const;
  /// Closes the group, aborts the communicator and throws unless rc is fine.
  void check_issue(ncclResult_t rc, const char* what);
  const Communicator* comm_;
  int exceptions_;  ///< std::uncaught_exceptions() when the group began
  bool open_ = true;
};

/// @brief An NCCL communicator over the ranks of an MPI one, one GPU per
/// rank, with its own stream: the equal-count collectives on device buffers
/// and grouped rooted and point-to-point calls. Calls throw backend_error
/// with NCCL's error string; an error or a timeout aborts it.
class Communicator {
public:
  /// An empty handle; every call on it throws. Use create().
  Communicator() = default;

  /// A communicator of the ranks of `control`, one GPU each. Collective over
  /// `control`. Throws backend_error if this node has fewer GPUs than ranks
  /// (NCCL refuses two ranks on one GPU) or if NCCL fails to start.
  static Communicator create(const mpi::Communicator& control, Options options = {});

  ///@{
  /// This rank, and the number of ranks.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  ///@}
  /// The GPU this rank uses.
  [[nodiscard]] int device() const;
  /// The host communicator of the same ranks: shardex's cross-rank checks
  /// (detail::agree) and small host-side reductions go through it.
  [[nodiscard]] const mpi::Communicator& control() const;
  /// This communicator's stream.
  [[nodiscard]] cudaStream_t stream() const;
  /// The raw NCCL handle (for interoperation; shardex keeps ownership).
  [[nodiscard]] ncclComm_t native() const;
  /// Whether the communicator was aborted after an error or a timeout.
  [[nodiscard]] bool aborted() const noexcept;

  // Equal-count collectives on device buffers. `count` is per rank.
  /// Every rank's `count` elements of `send` into `recv`, in rank order.
  template <class T>
  void all_gather(const T* send, T* recv, std::int64_t count) const {
    all_gather_raw(send, recv, count, datatype<T>());
  }
  /// The sum over ranks of `send` (size * count elements); rank r receives
  /// block r of `count` into `recv`.
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::int64_t count) const {
    reduce_scatter_raw(send, recv, count, datatype<T>());
  }
  /// The sum over ranks of `buf`, in place.
  template <class T>
  void all_reduce(T* buf, std::int64_t count) const {
    all_reduce_raw(buf, buf, count, datatype<T>());
  }
  /// The sum over ranks of every rank's `send` into `recv`.
  template <class T>
  void all_reduce(const T* send, T* recv, std::int64_t count) const {
    all_reduce_raw(send, recv, count, datatype<T>());
  }
  /// The element-wise maximum over ranks of `buf`, in place (ncclMax).
  template <class T>
  void all_reduce_max(T* buf, std::int64_t count) const {
    all_reduce_raw(buf, buf, count, datatype<T>(), ncclMax);
  }
  /// The element-wise maximum over ranks of every rank's `send` into `recv`.
  template <class T>
  void all_reduce_max(const T* send, T* recv, std::int64_t count) const {
    all_reduce_raw(send, recv, count, datatype<T>(), ncclMax);
  }
  /// Block i of `count` elements of `send` to rank i; block j of `recv` from rank j.
  template <class T>
  void all_to_all(const T* send, T* recv, std::int64_t count) const {
    all_to_all_raw(send, recv, count, datatype<T>());
  }
  /// root's `buf` into every rank's `buf`.
  template <class T>
  void broadcast(T* buf, std::int64_t count, int root) const {
    broadcast_raw(buf, count, datatype<T>(), root);
  }

  /// NCCL has no v collectives: uneven shards take the padded, per_root or
  /// send_recv strategies.
  static constexpr bool has_v_collectives = false;

  /// Element-wise minimum over ranks of host values, through control().
  void all_reduce_min(std::int64_t* buf, int count) const { control().all_reduce_min(buf, count); }

  /// A Group of calls on this communicator.
  [[nodiscard]] Group group() const { return Group(*this); }

  /// Ends the communicator now with ncclCommAbort (also done on errors).
  void abort(const std::string& reason) const;

private:
  friend class Group;
  struct Handle;
  explicit Communicator(std::shared_ptr<Handle> h);
  const Handle& handle(const char* what) const;
  void all_gather_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const;
  void reduce_scatter_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const;
  void all_reduce_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t,
                      ncclRedOp_t op = ncclSum) const;
  void all_to_all_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const;
  void broadcast_raw(void* buf, std::int64_t count, ncclDataType_t t, int root) const;
  /// Orders this communicator's stream after the compute stream.
  void begin(const char* what) const;
  /// Checks an NCCL return code; waits for the call's work with the watchdog.
  void finish(ncclResult_t rc, const char* what) const;

  std::shared_ptr<Handle> handle_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace shardex::nccl
