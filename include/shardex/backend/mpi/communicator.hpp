// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `shardex::mpi::Communicator`: a shared RAII handle to an MPI
/// communicator, with the small set of primitives every lowering plan is built
/// from (see lower/). Errors become `backend_error` with MPI's error string.
///
/// **Concept `CollectiveBackend`** (lower/backend.hpp). Models: this class.
///
/// The primitives take raw host pointers and element counts; counts of zero
/// are legal and move nothing. Equal-count primitives: `all_gather`,
/// `reduce_scatter`, `all_reduce`, `all_to_all`. Grouped point-to-point and
/// rooted primitives go through `Group`, which issues non-blocking calls and
/// waits for all of them at `end()` (the reference's coalescing manager).
/// MPI's own `v` collectives: `all_gather_v`, `reduce_scatter_v`, `all_to_all_v`.
///
/// **A build without MPI** (`-Dmpi=disabled`, or no MPI found; then
/// `SHARDEX_WITH_MPI` is 0) has the same class over a one-rank world only:
/// `world()` is rank 0 of size 1, every collective is a local copy (or
/// nothing, for `all_reduce` and `broadcast`), a `Group`'s send to rank 0 is
/// received by its recv from rank 0, `split` gives a one-rank communicator, and
/// a root or peer other than 0 throws `invalid_argument`. `native()`,
/// `duplicate(MPI_Comm)`, `datatype<T>()`, `check` and `to_count` exist only
/// with MPI; nothing here includes <mpi.h> without it.

#include "shardex/config.hpp"

#if SHARDEX_WITH_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/strided_block.hpp"

namespace shardex::mpi {

/// The element types the primitives move, named without MPI's types so that
/// this header needs no <mpi.h> (the library maps them to MPI_Datatype).
enum class Dtype { f32, f64, i64, i8 };
/// The size of one element of type t.
constexpr std::int64_t dtype_bytes(Dtype t) { return t == Dtype::f64 || t == Dtype::i64 ? 8 : t == Dtype::f32 ? 4 : 1; }

/// The Dtype of T: float, double, std::int64_t, or char (bytes, as `i8`).
template <class T>
constexpr Dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return Dtype::f32;
  else if constexpr (std::is_same_v<T, double>)
    return Dtype::f64;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return Dtype::i64;
  else if constexpr (std::is_same_v<T, char>)
    return Dtype::i8;
  else
    static_assert(sizeof(T) == 0, SHARDEX_ERR_MPI_ELEMENT_TYPE);
}

#if SHARDEX_WITH_MPI
/// The MPI datatype of T (float, double, int64_t, char).
template <class T>
MPI_Datatype datatype();
///@{
/// MPI_FLOAT, MPI_DOUBLE, MPI_INT64_T, MPI_CHAR.
template <>
inline MPI_Datatype datatype<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype datatype<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype datatype<std::int64_t>() {
  return MPI_INT64_T;
}
template <>
inline MPI_Datatype datatype<char>() {
  return MPI_CHAR;
}
///@}

/// Throws backend_error("<what>: <MPI error string>") if rc is not MPI_SUCCESS.
void check(int rc, const char* what);

/// MPI counts are `int`; this refuses larger ones with a clear message.
int to_count(std::int64_t n, const char* what);
/// to_count of every element of a list.
std::vector<int> to_counts(std::span<const std::int64_t> n, const char* what);
#endif

class Communicator;

/// One piece of a strided exchange (Communicator::exchange_blocks).
using Block = StridedBlock;

/// Non-blocking rooted and point-to-point calls issued together and completed
/// together by `end()`. Buffers must stay alive until `end()` returns.
class Group {
public:
  /// A group of calls on communicator c (which must outlive it).
  explicit Group(const Communicator& c);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group();

  /// root's `buf` into every rank's `buf`.
  template <class T>
  void broadcast(T* buf, std::int64_t count, int root) {
    broadcast_raw(buf, count, dtype_of<T>(), root);
  }
  /// Sum of every rank's `send` into `recv` on `root` (recv is ignored elsewhere).
  template <class T>
  void reduce(const T* send, T* recv, std::int64_t count, int root) {
    reduce_raw(send, recv, count, dtype_of<T>(), root);
  }
  /// `count` elements of `buf` to rank `peer`.
  template <class T>
  void send(const T* buf, std::int64_t count, int peer) {
    send_raw(buf, count, dtype_of<T>(), peer);
  }
  /// `count` elements from rank `peer` into `buf`.
  template <class T>
  void recv(T* buf, std::int64_t count, int peer) {
    recv_raw(buf, count, dtype_of<T>(), peer);
  }
  /// Waits for every call issued since the last end(); the group can then
  /// take more. @throws backend_error if a call fails.
  void end();

private:
  void broadcast_raw(void* buf, std::int64_t count, Dtype t, int root);
  void reduce_raw(const void* send, void* recv, std::int64_t count, Dtype t, int root);
  void send_raw(const void* buf, std::int64_t count, Dtype t, int peer);
  void recv_raw(void* buf, std::int64_t count, Dtype t, int peer);
  /// The calls in flight (MPI requests, or the one-rank world's pending
  /// sends and receives): defined by the library, so that this header needs
  /// no MPI type.
  struct State;
  const Communicator* comm_;
  std::unique_ptr<State> state_;
};

/// @brief A communicator: a shared handle on a duplicate of an MPI
/// communicator (or on the one-rank world without MPI), with the equal-count
/// and v collectives, rooted calls in groups, and a watchdog deadline. Calls
/// throw backend_error with MPI's error string.
class Communicator {
public:
  /// An empty handle; every call on it throws. Use world() or duplicate().
  Communicator() = default;
  /// A duplicate of MPI_COMM_WORLD (shardex's traffic never mixes with the user's);
  /// without MPI, the one-rank world. Needs a live Environment either way.
  static Communicator world();
#if SHARDEX_WITH_MPI
  /// Wraps `comm`, duplicating it; the duplicate is freed with the last handle.
  static Communicator duplicate(MPI_Comm comm);
#endif

  ///@{
  /// This rank, and the number of ranks.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  ///@}
#if SHARDEX_WITH_MPI
  /// The MPI communicator (the duplicate), for calls shardex does not wrap.
  [[nodiscard]] MPI_Comm native() const noexcept;
#endif
  /// The watchdog's deadline for this communicator's blocking calls (and
  /// the agreement before each collective): a call still waiting after it
  /// ends the process with a message naming the call (core/watchdog.hpp).
  /// Starts at SHARDEX_TIMEOUT seconds, else 300 s; shared by the copies of
  /// this handle, not by communicators split from it. Throws for a
  /// non-positive value.
  void set_timeout(std::chrono::milliseconds timeout);
  /// The watchdog's deadline (set_timeout()).
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept;
  /// How the watchdog names this communicator ("a communicator of 4 ranks (rank 1 there, 1 in MPI_COMM_WORLD)").
  [[nodiscard]] const char* description() const noexcept;
  /// Sub-communicator of the ranks passing the same `color`, ordered by `key`.
  [[nodiscard]] Communicator split(int color, int key) const;
  /// Ranks of this communicator on the same node (shared memory).
  [[nodiscard]] Communicator split_node_local() const;
  /// Waits until every rank has called it.
  void barrier() const;

  // Equal-count collectives. `count` is per rank.
  /// Every rank's `count` elements of `send` into `recv`, in rank order.
  template <class T>
  void all_gather(const T* send, T* recv, std::int64_t count) const {
    all_gather_raw(send, recv, count, dtype_of<T>());
  }
  /// The sum over ranks of `send` (size * count elements); rank r receives
  /// block r of `count` into `recv`.
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::int64_t count) const {
    reduce_scatter_raw(send, recv, count, dtype_of<T>());
  }
  /// The sum over ranks of `buf`, in place.
  template <class T>
  void all_reduce(T* buf, std::int64_t count) const {
    all_reduce_raw(buf, buf, count, dtype_of<T>());
  }
  /// The sum over ranks of every rank's `send` into `recv` (out of place: no copy first).
  template <class T>
  void all_reduce(const T* send, T* recv, std::int64_t count) const {
    all_reduce_raw(send, recv, count, dtype_of<T>());
  }
  /// The element-wise maximum over ranks of `buf`, in place (MPI_MAX): the
  /// row maxima of a vocab-parallel cross-entropy.
  template <class T>
  void all_reduce_max(T* buf, std::int64_t count) const {
    all_reduce_raw(buf, buf, count, dtype_of<T>(), Reduction::max);
  }
  /// The element-wise maximum over ranks of every rank's `send` into `recv`.
  template <class T>
  void all_reduce_max(const T* send, T* recv, std::int64_t count) const {
    all_reduce_raw(send, recv, count, dtype_of<T>(), Reduction::max);
  }
  /// Block i of `count` elements of `send` to rank i; block j of `recv` from rank j.
  template <class T>
  void all_to_all(const T* send, T* recv, std::int64_t count) const {
    all_to_all_raw(send, recv, count, dtype_of<T>());
  }
  /// root's `buf` into every rank's `buf`.
  template <class T>
  void broadcast(T* buf, std::int64_t count, int root) const {
    broadcast_raw(buf, count, dtype_of<T>(), root);
  }

  /// The most elements one call can move: MPI's counts are ints (2^31-1).
  /// Tensor factories refuse a local part larger than this before allocating.
#if SHARDEX_WITH_MPI
  static constexpr std::int64_t max_count = 2147483647;
#else
  static constexpr std::int64_t max_count = INT64_MAX;  // the one-rank world copies; nothing is counted in ints
#endif

  // MPI's v collectives (uneven counts; counts and displacements in elements).
  /// The v collectives below exist (the strategies' v_collective; NCCL has none).
  static constexpr bool has_v_collectives = true;
  /// Every rank's `count` elements of `send` into `recv`, rank r's at
  /// displs[r] with counts[r] elements (MPI_Allgatherv).
  template <class T>
  void all_gather_v(const T* send, std::int64_t count, T* recv, std::span<const std::int64_t> counts,
                    std::span<const std::int64_t> displs) const {
    all_gather_v_raw(send, count, recv, counts, displs, dtype_of<T>());
  }
  /// The sum over ranks of `send`; rank r receives its counts[r] elements, in
  /// rank order (MPI_Reduce_scatter).
  template <class T>
  void reduce_scatter_v(const T* send, T* recv, std::span<const std::int64_t> counts) const {
    reduce_scatter_v_raw(send, recv, counts, dtype_of<T>());
  }
  /// send_counts[i] elements at send_displs[i] to rank i, recv_counts[j] at
  /// recv_displs[j] from rank j (MPI_Alltoallv).
  template <class T>
  void all_to_all_v(const T* send, std::span<const std::int64_t> send_counts, std::span<const std::int64_t> send_displs,
                    T* recv, std::span<const std::int64_t> recv_counts,
                    std::span<const std::int64_t> recv_displs) const {
    all_to_all_v_raw(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype_of<T>());
  }

  /// Every rank sends `to[i]` of `send` to rank i and receives `from[j]` of
  /// `recv` from rank j (MPI_Alltoallw with a derived datatype per piece), so
  /// that strided pieces go between the tensors' own storage without a pack
  /// or unpack pass. to[i].count() on rank r must equal from[r].count() on i.
  template <class T>
  void exchange_blocks(const T* send, std::span<const Block> to, T* recv, std::span<const Block> from) const {
    exchange_blocks_raw(send, to, recv, from, dtype_of<T>());
  }

  /// Element-wise minimum over ranks, in place (used by the cross-rank checks).
  void all_reduce_min(std::int64_t* buf, int count) const;

  /// A Group of calls on this communicator.
  [[nodiscard]] Group group() const { return Group(*this); }

private:
  friend class Group;  // the one-rank Group checks that its communicator is not empty
  struct Handle;
  explicit Communicator(std::shared_ptr<Handle> h);
  void all_gather_raw(const void* send, void* recv, std::int64_t count, Dtype t) const;
  void reduce_scatter_raw(const void* send, void* recv, std::int64_t count, Dtype t) const;
  /// What an all-reduce computes over the ranks.
  enum class Reduction { sum, max };
  void all_reduce_raw(const void* send, void* recv, std::int64_t count, Dtype t,
                      Reduction op = Reduction::sum) const;
  void all_to_all_raw(const void* send, void* recv, std::int64_t count, Dtype t) const;
  void broadcast_raw(void* buf, std::int64_t count, Dtype t, int root) const;
  void all_gather_v_raw(const void* send, std::int64_t count, void* recv, std::span<const std::int64_t> counts,
                        std::span<const std::int64_t> displs, Dtype t) const;
  void reduce_scatter_v_raw(const void* send, void* recv, std::span<const std::int64_t> counts, Dtype t) const;
  void exchange_blocks_raw(const void* send, std::span<const Block> to, void* recv, std::span<const Block> from,
                           Dtype t) const;
  void all_to_all_v_raw(const void* send, std::span<const std::int64_t> send_counts,
                        std::span<const std::int64_t> send_displs, void* recv,
                        std::span<const std::int64_t> recv_counts, std::span<const std::int64_t> recv_displs,
                        Dtype t) const;

  std::shared_ptr<Handle> handle_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace shardex::mpi
