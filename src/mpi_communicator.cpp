// SPDX-License-Identifier: MIT
// The MPI primitives behind shardex::mpi::Communicator. Every call's return
// code goes through check(), which turns it into a backend_error carrying
// MPI's own error string (the communicator is set to MPI_ERRORS_RETURN).
#include "shardex/backend/mpi/communicator.hpp"

#include <climits>

#include "shardex/core/backend_calls.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/core/watchdog.hpp"

#include "shardex/backend/mpi/environment.hpp"

namespace shardex::mpi {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw backend_error(std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(len)), rc);
}

int to_count(std::int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw invalid_argument(std::string(what) + ": element count " + std::to_string(n) +
                           " does not fit MPI's int counts (0 .. 2^31-1); split the tensor or use the NCCL backend");
  return static_cast<int>(n);
}

std::vector<int> to_counts(std::span<const std::int64_t> n, const char* what) {
  std::vector<int> out(n.size());
  for (std::size_t i = 0; i < n.size(); ++i) out[i] = to_count(n[i], what);
  return out;
}

namespace {
/// The MPI datatype of the header's Dtype (which names no MPI type).
MPI_Datatype mpi_type(Dtype t) {
  switch (t) {
    case Dtype::f32:
      return MPI_FLOAT;
    case Dtype::f64:
      return MPI_DOUBLE;
    case Dtype::i64:
      return MPI_INT64_T;
    case Dtype::i8:
      return MPI_CHAR;
  }
  throw invalid_argument("shardex::mpi: unknown Dtype " + std::to_string(static_cast<int>(t)));
}
}  // namespace

struct Communicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  /// The watchdog's deadline for this communicator's calls, and how its
  /// message names the communicator.
  std::chrono::milliseconds timeout = watchdog::default_timeout();
  std::string where = "a communicator";
  /// Why grouped sends and receives are refused on this communicator (empty:
  /// they are not): set when a group left by an error cancelled a receive, as
  /// the message meant for it may still arrive and would be matched by the
  /// next receive from that rank (a wrong result, silently).
  std::string point_to_point_refused;
  explicit Handle(MPI_Comm c) : comm(c) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    // A communicator outliving MPI_Finalize cannot be freed any more; that is harmless.
    if (comm != MPI_COMM_NULL && Environment::active()) MPI_Comm_free(&comm);
  }
};

Communicator::Communicator(std::shared_ptr<Handle> h) : handle_(std::move(h)) {
  check(MPI_Comm_set_errhandler(handle_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(handle_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(handle_->comm, &size_), "MPI_Comm_size");
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  handle_->where = "a communicator of " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") + " (rank " +
                   std::to_string(rank_) + " there, " + std::to_string(world) + " in MPI_COMM_WORLD)";
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  if (!handle_)
    throw error(
        "Communicator::set_timeout: the communicator is empty (default-constructed); use Communicator::world()");
  if (timeout.count() <= 0)
    throw invalid_argument("Communicator::set_timeout: the deadline must be positive, got " +
                           std::to_string(timeout.count()) + " ms");
  handle_->timeout = timeout;
}

const char* Communicator::description() const noexcept {
  return handle_ ? handle_->where.c_str() : "an empty communicator";
}

std::chrono::milliseconds Communicator::timeout() const noexcept {
  return handle_ ? handle_->timeout : watchdog::default_timeout();
}

Communicator Communicator::duplicate(MPI_Comm comm) {
  if (!Environment::active())
    throw error("shardex::mpi::Communicator: MPI is not initialized; construct a shardex::mpi::Environment first");
  MPI_Comm dup = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return Communicator(std::make_shared<Handle>(dup));
}

Communicator Communicator::world() { return duplicate(MPI_COMM_WORLD); }

MPI_Comm Communicator::native() const noexcept { return handle_ ? handle_->comm : MPI_COMM_NULL; }

namespace {
/// One blocking MPI call: timed (counters) and watched (the watchdog).
struct Watched {
  detail::BackendTimer timer;
  watchdog::Armed armed;
  Watched(const Communicator& c, const char* call) noexcept : armed(call, c.description(), c.timeout()) {}
};

MPI_Comm need(MPI_Comm c, const char* what) {
  if (c == MPI_COMM_NULL)
    throw error(std::string(what) + ": the communicator is empty (default-constructed); use Communicator::world()");
  return c;
}
}  // namespace

Communicator Communicator::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_split(need(native(), "MPI_Comm_split"), color, key, &out), "MPI_Comm_split");
  return Communicator(std::make_shared<Handle>(out));
}

Communicator Communicator::split_node_local() const {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_split_type(need(native(), "MPI_Comm_split_type"), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out),
        "MPI_Comm_split_type");
  return Communicator(std::make_shared<Handle>(out));
}

void Communicator::barrier() const {
  const Watched w(*this, "MPI_Barrier");
  check(MPI_Barrier(need(native(), "MPI_Barrier")), "MPI_Barrier");
}

void Communicator::all_gather_raw(const void* send, void* recv, std::int64_t count, Dtype dt) const {
  detail::record_backend_call("all_gather", count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const int n = to_count(count, "MPI_Allgather");
  const Watched timer(*this, "MPI_Allgather");
  check(MPI_Allgather(send, n, t, recv, n, t, need(native(), "MPI_Allgather")), "MPI_Allgather");
}

void Communicator::reduce_scatter_raw(const void* send, void* recv, std::int64_t count, Dtype dt) const {
  detail::record_backend_call("reduce_scatter", size() * count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const int n = to_count(count, "MPI_Reduce_scatter_block");
  const Watched timer(*this, "MPI_Reduce_scatter_block");
  check(MPI_Reduce_scatter_block(send, recv, n, t, MPI_SUM, need(native(), "MPI_Reduce_scatter_block")),
        "MPI_Reduce_scatter_block");
}

void Communicator::all_reduce_raw(const void* send, void* recv, std::int64_t count, Dtype dt, Reduction op) const {
  const bool max = op == Reduction::max;
  detail::record_backend_call(max ? "all_reduce_max" : "all_reduce", count * dtype_bytes(dt));
  const char* call = max ? "MPI_Allreduce (MPI_MAX)" : "MPI_Allreduce";
  const MPI_Datatype t = mpi_type(dt);
  const int n = to_count(count, call);
  const Watched timer(*this, call);
  check(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, t, max ? MPI_MAX : MPI_SUM, need(native(), call)),
        call);
}

void Communicator::all_to_all_raw(const void* send, void* recv, std::int64_t count, Dtype dt) const {
  detail::record_backend_call("all_to_all", size() * count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const int n = to_count(count, "MPI_Alltoall");
  const Watched timer(*this, "MPI_Alltoall");
  check(MPI_Alltoall(send, n, t, recv, n, t, need(native(), "MPI_Alltoall")), "MPI_Alltoall");
}

void Communicator::broadcast_raw(void* buf, std::int64_t count, Dtype dt, int root) const {
  detail::record_backend_call("broadcast", root == rank() ? count * dtype_bytes(dt) : 0);
  const MPI_Datatype t = mpi_type(dt);
  const Watched timer(*this, "MPI_Bcast");
  check(MPI_Bcast(buf, to_count(count, "MPI_Bcast"), t, root, need(native(), "MPI_Bcast")), "MPI_Bcast");
}

void Communicator::all_gather_v_raw(const void* send, std::int64_t count, void* recv,
                                    std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                                    Dtype dt) const {
  detail::record_backend_call("all_gather_v", count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const auto c = to_counts(counts, "MPI_Allgatherv");
  const auto d = to_counts(displs, "MPI_Allgatherv");
  const Watched timer(*this, "MPI_Allgatherv");
  check(MPI_Allgatherv(send, to_count(count, "MPI_Allgatherv"), t, recv, c.data(), d.data(), t,
                       need(native(), "MPI_Allgatherv")),
        "MPI_Allgatherv");
}

namespace {
/// The datatypes of one side of a block exchange: a contiguous run is the
/// element type with a count; a strided piece is an MPI vector. MPI_Alltoallw
/// takes byte displacements as int: a piece further than 2 GiB into its
/// buffer is wrapped in a struct type carrying the displacement as MPI_Aint.
/// The types made here are freed with the object.
struct BlockTypes {
  std::vector<MPI_Datatype> types, owned;
  std::vector<int> counts, displs;  // displacements in bytes (MPI_Alltoallw)
  BlockTypes(std::span<const Block> blocks, MPI_Datatype t, const char* what) {
    int size = 0;
    check(MPI_Type_size(t, &size), "MPI_Type_size");
    for (const Block& b : blocks) {
      MPI_Datatype piece = t;
      int count = to_count(b.count(), what);
      if (count > 0 && b.rows > 1 && b.stride != b.run) {
        check(MPI_Type_vector(to_count(b.rows, what), to_count(b.run, what), to_count(b.stride, what), t, &piece),
              "MPI_Type_vector");
        owned.push_back(piece);
        check(MPI_Type_commit(&piece), "MPI_Type_commit");
        count = 1;
      }
      const MPI_Aint bytes = static_cast<MPI_Aint>(b.offset) * size;
      if (count == 0 || bytes <= INT_MAX) {
        types.push_back(piece);
        counts.push_back(count);
        displs.push_back(count == 0 ? 0 : static_cast<int>(bytes));
        continue;
      }
      MPI_Datatype placed = MPI_DATATYPE_NULL;
      check(MPI_Type_create_struct(1, &count, &bytes, &piece, &placed), "MPI_Type_create_struct");
      owned.push_back(placed);
      check(MPI_Type_commit(&placed), "MPI_Type_commit");
      types.push_back(placed);
      counts.push_back(1);
      displs.push_back(0);
    }
  }
  BlockTypes(const BlockTypes&) = delete;
  BlockTypes& operator=(const BlockTypes&) = delete;
  ~BlockTypes() {
    for (auto& v : owned) MPI_Type_free(&v);
  }
};
}  // namespace

void Communicator::exchange_blocks_raw(const void* send, std::span<const Block> to, void* recv,
                                       std::span<const Block> from, Dtype dt) const {
  detail::record_backend_call("exchange_blocks", detail::elements_of(to) * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const BlockTypes s(to, t, "MPI_Alltoallw"), r(from, t, "MPI_Alltoallw");
  const Watched timer(*this, "MPI_Alltoallw");
  check(MPI_Alltoallw(send, s.counts.data(), s.displs.data(), s.types.data(), recv, r.counts.data(), r.displs.data(),
                      r.types.data(), need(native(), "MPI_Alltoallw")),
        "MPI_Alltoallw");
}

void Communicator::reduce_scatter_v_raw(const void* send, void* recv, std::span<const std::int64_t> counts,
                                        Dtype dt) const {
  detail::record_backend_call("reduce_scatter_v", detail::elements_of(counts) * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const auto c = to_counts(counts, "MPI_Reduce_scatter");
  const Watched timer(*this, "MPI_Reduce_scatter");
  check(MPI_Reduce_scatter(send, recv, c.data(), t, MPI_SUM, need(native(), "MPI_Reduce_scatter")),
        "MPI_Reduce_scatter");
}

void Communicator::all_to_all_v_raw(const void* send, std::span<const std::int64_t> send_counts,
                                    std::span<const std::int64_t> send_displs, void* recv,
                                    std::span<const std::int64_t> recv_counts,
                                    std::span<const std::int64_t> recv_displs, Dtype dt) const {
  detail::record_backend_call("all_to_all_v", detail::elements_of(send_counts) * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  const auto sc = to_counts(send_counts, "MPI_Alltoallv");
  const auto sd = to_counts(send_displs, "MPI_Alltoallv");
  const auto rc = to_counts(recv_counts, "MPI_Alltoallv");
  const auto rd = to_counts(recv_displs, "MPI_Alltoallv");
  const Watched timer(*this, "MPI_Alltoallv");
  check(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, need(native(), "MPI_Alltoallv")),
        "MPI_Alltoallv");
}

void Communicator::all_reduce_min(std::int64_t* buf, int count) const {
  detail::record_backend_call("agreement", 0);
  const Watched timer(*this, "MPI_Allreduce (the cross-rank agreement before a collective)");
  check(MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_INT64_T, MPI_MIN, need(native(), "MPI_Allreduce(min)")),
        "MPI_Allreduce(min)");
}

// ---- Group ---------------------------------------------------------------

struct Group::State {
  std::vector<MPI_Request> requests;
  std::vector<int> recv_from;  // per request: the peer of a receive, or -1
  /// Room for one more request in both lists, made before the MPI call, so
  /// that a request in flight is never left out of them by a failed allocation.
  void make_room() {
    if (requests.size() == requests.capacity()) requests.reserve(2 * requests.size() + 8);
    if (recv_from.size() == recv_from.capacity()) recv_from.reserve(2 * recv_from.size() + 8);
  }
};

Group::Group(const Communicator& c) : comm_(&c), state_(std::make_unique<State>()) {}

Group::~Group() {
  // Requests still in flight reference user buffers: they must end before the
  // buffers can go away. Errors cannot be reported from a destructor.
  auto& rs = state_->requests;
  if (rs.empty()) return;
  // Here after an error part-way through the group (end() was not reached).
  // Receives are cancelled: a peer may never send (it failed too, or never
  // got here), and this rank should report its error now, not wait. Sends and
  // rooted calls cannot be cancelled; they are waited for, watched: a peer
  // that never posts its side ends the job at the deadline.
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (state_->recv_from[i] >= 0) MPI_Cancel(&rs[i]);
  std::vector<MPI_Status> statuses(rs.size());
  {
    const watchdog::Armed armed("MPI_Waitall (the sends of a grouped send/receive left by an error)",
                                comm_->description(), comm_->timeout());
    MPI_Waitall(static_cast<int>(rs.size()), rs.data(), statuses.data());
  }
  for (std::size_t i = 0; i < rs.size(); ++i) {
    int cancelled = 0;
    if (state_->recv_from[i] >= 0 && MPI_Test_cancelled(&statuses[i], &cancelled) == MPI_SUCCESS && cancelled &&
        comm_->handle_ && comm_->handle_->point_to_point_refused.empty())
      comm_->handle_->point_to_point_refused =
          "a grouped receive from rank " + std::to_string(state_->recv_from[i]) + " on rank " +
          std::to_string(comm_->rank()) +
          " was cancelled after an error, and the message meant for it may still "
          "arrive; use a new communicator (Communicator::split or duplicate) for grouped sends and receives "
          "(collectives on this one still work)";
  }
}

namespace {
/// The communicator of a grouped send or receive, unless grouped traffic on it was refused.
MPI_Comm point_to_point(const Communicator& c, const std::string& refused, const char* what) {
  if (!refused.empty()) throw error(std::string(what) + " on " + c.description() + ": refused, because " + refused);
  return need(c.native(), what);
}
}  // namespace

void Group::broadcast_raw(void* buf, std::int64_t count, Dtype dt, int root) {
  detail::record_backend_call("broadcast", root == comm_->rank() ? count * dtype_bytes(dt) : 0);
  const MPI_Datatype t = mpi_type(dt);
  MPI_Request r = MPI_REQUEST_NULL;
  state_->make_room();
  check(MPI_Ibcast(buf, to_count(count, "MPI_Ibcast"), t, root, need(comm_->native(), "MPI_Ibcast"), &r), "MPI_Ibcast");
  state_->requests.push_back(r);
  state_->recv_from.push_back(-1);
}

void Group::reduce_raw(const void* send, void* recv, std::int64_t count, Dtype dt, int root) {
  detail::record_backend_call("reduce", count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  MPI_Request r = MPI_REQUEST_NULL;
  state_->make_room();
  check(MPI_Ireduce(send, recv, to_count(count, "MPI_Ireduce"), t, MPI_SUM, root, need(comm_->native(), "MPI_Ireduce"),
                    &r),
        "MPI_Ireduce");
  state_->requests.push_back(r);
  state_->recv_from.push_back(-1);
}

void Group::send_raw(const void* buf, std::int64_t count, Dtype dt, int peer) {
  detail::record_backend_call("send", count * dtype_bytes(dt));
  const MPI_Datatype t = mpi_type(dt);
  MPI_Request r = MPI_REQUEST_NULL;
  state_->make_room();
  const MPI_Comm c =
      point_to_point(*comm_, comm_->handle_ ? comm_->handle_->point_to_point_refused : std::string(), "MPI_Isend");
  check(MPI_Isend(buf, to_count(count, "MPI_Isend"), t, peer, 0, c, &r), "MPI_Isend");
  state_->requests.push_back(r);
  state_->recv_from.push_back(-1);
}

void Group::recv_raw(void* buf, std::int64_t count, Dtype dt, int peer) {
  detail::record_backend_call("recv", 0);
  const MPI_Datatype t = mpi_type(dt);
  MPI_Request r = MPI_REQUEST_NULL;
  state_->make_room();
  const MPI_Comm c =
      point_to_point(*comm_, comm_->handle_ ? comm_->handle_->point_to_point_refused : std::string(), "MPI_Irecv");
  check(MPI_Irecv(buf, to_count(count, "MPI_Irecv"), t, peer, 0, c, &r), "MPI_Irecv");
  state_->requests.push_back(r);
  state_->recv_from.push_back(peer);
}

void Group::end() {
  std::vector<MPI_Request> rs;
  rs.swap(state_->requests);
  state_->recv_from.clear();
  const Watched timer(*comm_, "MPI_Waitall (the end of a grouped send/receive, broadcast or reduce)");
  if (!rs.empty())
    check(MPI_Waitall(static_cast<int>(rs.size()), rs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall (group end)");
}

}  // namespace shardex::mpi
