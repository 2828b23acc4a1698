// SPDX-License-Identifier: MIT
// shardex::mpi::Communicator for a build without MPI: the one-rank world.
// With a single rank every collective's result is the rank's own input, so
// each primitive is a local copy (or nothing, when the result is in place);
// a Group's send to rank 0 is received by the same group's recv from rank 0.
// Arguments are checked as MPI would (a root or peer other than 0, a negative
// count, counts that disagree), so that a program that would fail on the MPI
// build fails here too instead of silently doing something else.
#include <algorithm>
#include <cstring>
#include <deque>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/backend/mpi/environment.hpp"
#include "shardex/core/backend_calls.hpp"
#include "shardex/core/watchdog.hpp"

#if SHARDEX_WITH_MPI
#error "serial_communicator.cpp is the build without MPI; src/meson.build compiles mpi_communicator.cpp instead"
#endif

namespace shardex::mpi {

namespace {

std::size_t bytes_of(Dtype t) {
  switch (t) {
    case Dtype::f32:
      return sizeof(float);
    case Dtype::f64:
      return sizeof(double);
    case Dtype::i64:
      return sizeof(std::int64_t);
    case Dtype::i8:
      return sizeof(char);
  }
  throw invalid_argument("shardex::mpi: unknown Dtype " + std::to_string(static_cast<int>(t)));
}

const char* const one_rank = " (this shardex was built without MPI: its world has the one rank 0)";

void need_count(std::int64_t n, const char* what) {
  if (n < 0) throw invalid_argument(std::string(what) + ": negative element count " + std::to_string(n));
}

void need_rank(int r, const char* role, const char* what) {
  if (r != 0)
    throw invalid_argument(std::string(what) + ": " + role + " " + std::to_string(r) +
                           " is not a rank of the communicator" + one_rank);
}

/// The counts of a v collective: one per rank, so exactly one here.
std::int64_t the_count(std::span<const std::int64_t> counts, const char* name, const char* what) {
  if (counts.size() != 1)
    throw invalid_argument(std::string(what) + ": " + std::to_string(counts.size()) + " " + name +
                           " for a communicator of 1 rank" + one_rank);
  need_count(counts[0], what);
  return counts[0];
}

/// Copies n elements; memmove, so that a caller passing one buffer for both
/// (which MPI forbids) still gets the right result here.
void copy(const void* from, void* to, std::int64_t n, Dtype t) {
  if (n > 0 && from != to) std::memmove(to, from, static_cast<std::size_t>(n) * bytes_of(t));
}

}  // namespace

/// A one-rank communicator has no state but its deadline (kept for the API:
/// a one-rank call never waits for a peer); the handle tells a live
/// communicator (world(), split()) from an empty, default-constructed one.
struct Communicator::Handle {
  std::chrono::milliseconds timeout = watchdog::default_timeout();
};

Communicator::Communicator(std::shared_ptr<Handle> h) : handle_(std::move(h)) {}

namespace {
/// Throws, naming the operation, if `h` is the empty handle.
void need(const void* h, const char* what) {
  if (h == nullptr)
    throw error(std::string(what) + ": the communicator is empty (default-constructed); use Communicator::world()");
}
}  // namespace

Communicator Communicator::world() {
  // Required as with MPI, so that a program which forgets it fails on this build too.
  if (!Environment::active())
    throw error("shardex::mpi::Communicator: no shardex::mpi::Environment is alive; construct one in main first");
  return Communicator(std::make_shared<Handle>());
}

Communicator Communicator::split(int /*color*/, int /*key*/) const {
  need(handle_.get(), "split");
  return Communicator(std::make_shared<Handle>());
}

Communicator Communicator::split_node_local() const {
  need(handle_.get(), "split_node_local");
  return Communicator(std::make_shared<Handle>());
}

void Communicator::barrier() const { need(handle_.get(), "barrier"); }

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  need(handle_.get(), "Communicator::set_timeout");
  if (timeout.count() <= 0)
    throw invalid_argument("Communicator::set_timeout: the deadline must be positive, got " +
                           std::to_string(timeout.count()) + " ms");
  handle_->timeout = timeout;
}

std::chrono::milliseconds Communicator::timeout() const noexcept {
  return handle_ ? handle_->timeout : watchdog::default_timeout();
}

const char* Communicator::description() const noexcept {
  return handle_ ? "the one-rank world (a build without MPI)" : "an empty communicator";
}

void Communicator::all_gather_raw(const void* send, void* recv, std::int64_t count, Dtype t) const {
  detail::record_backend_call("all_gather", count * dtype_bytes(t));
  need(handle_.get(), "all_gather");
  need_count(count, "all_gather");
  copy(send, recv, count, t);
}

void Communicator::reduce_scatter_raw(const void* send, void* recv, std::int64_t count, Dtype t) const {
  detail::record_backend_call("reduce_scatter", count * dtype_bytes(t));
  need(handle_.get(), "reduce_scatter");
  need_count(count, "reduce_scatter");
  copy(send, recv, count, t);
}

void Communicator::all_reduce_raw(const void* send, void* recv, std::int64_t count, Dtype t, Reduction op) const {
  const char* what = op == Reduction::max ? "all_reduce_max" : "all_reduce";
  detail::record_backend_call(what, count * dtype_bytes(t));
  need(handle_.get(), what);
  need_count(count, what);
  if (send != recv) copy(send, recv, count, t);  // the sum (or maximum) over one rank is its own buffer
}

void Communicator::all_to_all_raw(const void* send, void* recv, std::int64_t count, Dtype t) const {
  detail::record_backend_call("all_to_all", count * dtype_bytes(t));
  need(handle_.get(), "all_to_all");
  need_count(count, "all_to_all");
  copy(send, recv, count, t);
}

void Communicator::broadcast_raw(void* /*buf*/, std::int64_t count, Dtype t, int root) const {
  detail::record_backend_call("broadcast", root == 0 ? count * dtype_bytes(t) : 0);
  need(handle_.get(), "broadcast");
  need_count(count, "broadcast");
  need_rank(root, "root", "broadcast");  // the root's buffer is already everyone's
}

void Communicator::all_gather_v_raw(const void* send, std::int64_t count, void* recv,
                                    std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                                    Dtype t) const {
  detail::record_backend_call("all_gather_v", count * dtype_bytes(t));
  const char* what = "all_gather_v";
  need(handle_.get(), what);
  need_count(count, what);
  const std::int64_t n = the_count(counts, "counts", what), d = the_count(displs, "displacements", what);
  if (n != count)
    throw invalid_argument(std::string(what) + ": rank 0 sends " + std::to_string(count) +
                           " elements but counts[0] is " + std::to_string(n));
  copy(send, static_cast<char*>(recv) + d * static_cast<std::int64_t>(bytes_of(t)), n, t);
}

void Communicator::reduce_scatter_v_raw(const void* send, void* recv, std::span<const std::int64_t> counts,
                                        Dtype t) const {
  detail::record_backend_call("reduce_scatter_v", detail::elements_of(counts) * dtype_bytes(t));
  const char* what = "reduce_scatter_v";
  need(handle_.get(), what);
  copy(send, recv, the_count(counts, "counts", what), t);
}

void Communicator::all_to_all_v_raw(const void* send, std::span<const std::int64_t> send_counts,
                                    std::span<const std::int64_t> send_displs, void* recv,
                                    std::span<const std::int64_t> recv_counts,
                                    std::span<const std::int64_t> recv_displs, Dtype t) const {
  detail::record_backend_call("all_to_all_v", detail::elements_of(send_counts) * dtype_bytes(t));
  const char* what = "all_to_all_v";
  need(handle_.get(), what);
  const std::int64_t sn = the_count(send_counts, "send counts", what),
                     sd = the_count(send_displs, "send displacements", what);
  const std::int64_t rn = the_count(recv_counts, "receive counts", what),
                     rd = the_count(recv_displs, "receive displacements", what);
  if (sn != rn)
    throw invalid_argument(std::string(what) + ": rank 0 sends " + std::to_string(sn) +
                           " elements to itself but receives " + std::to_string(rn));
  const auto b = static_cast<std::int64_t>(bytes_of(t));
  copy(static_cast<const char*>(send) + sd * b, static_cast<char*>(recv) + rd * b, sn, t);
}

void Communicator::exchange_blocks_raw(const void* send, std::span<const Block> to, void* recv,
                                       std::span<const Block> from, Dtype t) const {
  detail::record_backend_call("exchange_blocks", detail::elements_of(to) * dtype_bytes(t));
  const char* what = "exchange_blocks";
  need(handle_.get(), what);
  if (to.size() != 1 || from.size() != 1)
    throw invalid_argument(std::string(what) + ": " + std::to_string(to.size()) + " and " +
                           std::to_string(from.size()) + " pieces for a communicator of 1 rank" + one_rank);
  const Block& a = to[0];
  const Block& b = from[0];
  if (a.count() != b.count())
    throw invalid_argument(std::string(what) + ": rank 0 sends " + std::to_string(a.count()) +
                           " elements to itself but receives " + std::to_string(b.count()));
  // Walk both pieces in their element order, one contiguous stretch at a time.
  const auto e = static_cast<std::int64_t>(bytes_of(t));
  const auto* src = static_cast<const char*>(send);
  auto* dst = static_cast<char*>(recv);
  std::int64_t ar = 0, ai = 0, br = 0, bi = 0, left = a.count();
  while (left > 0) {
    const std::int64_t n = std::min({a.run - ai, b.run - bi, left});
    std::memmove(dst + (b.offset + br * b.stride + bi) * e, src + (a.offset + ar * a.stride + ai) * e,
                 static_cast<std::size_t>(n * e));
    left -= n;
    if ((ai += n) == a.run) ai = 0, ++ar;
    if ((bi += n) == b.run) bi = 0, ++br;
  }
}

void Communicator::all_reduce_min(std::int64_t* /*buf*/, int count) const {
  detail::record_backend_call("agreement", 0);
  need(handle_.get(), "all_reduce_min");
  need_count(count, "all_reduce_min");  // the minimum over one rank is the buffer itself
}

// ---- Group ---------------------------------------------------------------

/// The sends and receives that have not met their partner yet. Rank 0 talks
/// only to itself, and messages between one pair are not reordered (MPI's
/// rule for one tag): the k-th send meets the k-th receive, whichever of the
/// two was issued first.
struct Group::State {
  struct Message {
    const void* buf;
    std::int64_t count;
    Dtype type;
  };
  struct Receive {
    void* buf;
    std::int64_t count;
    Dtype type;
  };
  std::deque<Message> sends;
  std::deque<Receive> receives;

  /// Delivers sends to receives while both are waiting.
  void match() {
    while (!sends.empty() && !receives.empty()) {
      const Message s = sends.front();
      const Receive r = receives.front();
      sends.pop_front();
      receives.pop_front();
      if (s.type != r.type)
        throw invalid_argument("Group::recv: the matching send to rank 0 has another element type" +
                               std::string(one_rank));
      if (s.count > r.count)
        throw invalid_argument("Group::recv: the matching send to rank 0 has " + std::to_string(s.count) +
                               " elements, more than the " + std::to_string(r.count) +
                               " received (the message would be truncated)");
      copy(s.buf, r.buf, s.count, s.type);
    }
  }
};

Group::Group(const Communicator& c) : comm_(&c), state_(std::make_unique<State>()) {}

Group::~Group() = default;  // nothing is in flight: every message was delivered when it met its partner

void Group::broadcast_raw(void* /*buf*/, std::int64_t count, Dtype t, int root) {
  detail::record_backend_call("broadcast", root == 0 ? count * dtype_bytes(t) : 0);
  need(comm_->handle_.get(), "Group::broadcast");
  need_count(count, "Group::broadcast");
  need_rank(root, "root", "Group::broadcast");
}

void Group::reduce_raw(const void* send, void* recv, std::int64_t count, Dtype t, int root) {
  detail::record_backend_call("reduce", count * dtype_bytes(t));
  need(comm_->handle_.get(), "Group::reduce");
  need_count(count, "Group::reduce");
  need_rank(root, "root", "Group::reduce");
  copy(send, recv, count, t);  // the sum over one rank, on the root
}

void Group::send_raw(const void* buf, std::int64_t count, Dtype t, int peer) {
  detail::record_backend_call("send", count * dtype_bytes(t));
  need(comm_->handle_.get(), "Group::send");
  need_count(count, "Group::send");
  need_rank(peer, "peer", "Group::send");
  state_->sends.push_back({buf, count, t});
  state_->match();
}

void Group::recv_raw(void* buf, std::int64_t count, Dtype t, int peer) {
  detail::record_backend_call("recv", 0);
  need(comm_->handle_.get(), "Group::recv");
  need_count(count, "Group::recv");
  need_rank(peer, "peer", "Group::recv");
  state_->receives.push_back({buf, count, t});
  state_->match();
}

void Group::end() {
  // With MPI an unmatched send or receive would wait forever; here it is an error.
  const std::size_t s = state_->sends.size(), r = state_->receives.size();
  state_->sends.clear();
  state_->receives.clear();
  if (s != 0 || r != 0)
    throw invalid_argument("Group::end: " + std::to_string(s) + " send(s) to rank 0 and " + std::to_string(r) +
                           " receive(s) from rank 0 found no partner in the group (with MPI this would hang)");
}

}  // namespace shardex::mpi
