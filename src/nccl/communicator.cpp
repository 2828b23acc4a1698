// SPDX-License-Identifier: MIT
// NCCL behind include/shardex/backend/nccl/communicator.hpp.
#include "shardex/backend/nccl/communicator.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "shardex/core/backend_calls.hpp"
#include "shardex/core/error.hpp"
#include "shardex/device/cuda/runtime.hpp"

namespace shardex::nccl {

struct Communicator::Handle {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;
  mpi::Communicator control;
  int device = 0;
  std::chrono::milliseconds timeout{};
  bool aborted = false;
  std::string abort_reason;

  ~Handle() {
    if (comm && !aborted) {
      // Flush (non-blocking: poll until done), then free; a flush that fails
      // or stalls ends in an abort. Errors at teardown cannot be reported.
      ncclResult_t st = ncclCommFinalize(comm);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while ((st == ncclSuccess || st == ncclInProgress) && ncclCommGetAsyncError(comm, &st) == ncclSuccess &&
             st == ncclInProgress && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      if (st == ncclSuccess)
        ncclCommDestroy(comm);
      else
        ncclCommAbort(comm);
    }
    if (compute_done) cudaEventDestroy(compute_done);
    if (stream) cudaStreamDestroy(stream);
  }
};

namespace {

std::string where(const mpi::Communicator& c) {
  return " on rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size());
}

/// Why the ranks of `node` (this node's ranks of a run) cannot each have a GPU
/// of their own; empty when they can.
std::string node_problem(const mpi::Communicator& node) {
  std::string why = cuda::no_gpu_reason();
  if (why.empty() && node.size() > cuda::device_count())
    why = std::to_string(node.size()) + " ranks share a node that has " + std::to_string(cuda::device_count()) +
          " GPU(s); NCCL needs one GPU per rank (it refuses two ranks on one GPU)";
  return why;
}

/// `why` made common to all ranks: empty on every rank, or non-empty on every
/// rank (a rank that gave up alone would leave its peers waiting in a collective).
std::string agreed(const mpi::Communicator& control, std::string why) {
  std::int64_t ok = why.empty() ? 1 : 0;
  control.all_reduce_min(&ok, 1);
  if (!ok && why.empty()) why = "another rank of this run cannot use a GPU";
  return why;
}

}  // namespace

std::string unavailable_reason(const mpi::Communicator& control) {
  return agreed(control, node_problem(control.split_node_local()));
}

Communicator::Communicator(std::shared_ptr<Handle> h) : handle_(std::move(h)) {
  rank_ = handle_->control.rank();
  size_ = handle_->control.size();
}

Communicator Communicator::create(const mpi::Communicator& control, Options options) {
  auto h = std::make_shared<Handle>();
  h->control = control;
  h->timeout = options.timeout;
  // This rank's GPU: the one requested, or its rank among its node's ranks.
  // Every rank learns whether every rank has one before any waits in the
  // bootstrap broadcast.
  const mpi::Communicator node = control.split_node_local();
  std::string why = options.device < 0 ? node_problem(node) : cuda::no_gpu_reason();
  const bool bad_request = why.empty() && options.device >= cuda::device_count();
  if (bad_request)
    why = "device " + std::to_string(options.device) + " requested but this node has " +
          std::to_string(cuda::device_count()) + " GPU(s)";
  const bool mine = !why.empty();
  why = agreed(control, why);
  if (!why.empty()) {
    const std::string msg = "shardex::nccl::Communicator::create" + where(control) + ": " + why;
    if (mine && bad_request) throw invalid_argument(msg);
    throw backend_error(msg, 0);
  }
  h->device = options.device >= 0 ? options.device : node.rank();
  cuda::set_device(h->device);
  cuda::check(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (NCCL stream)");
  cuda::check(cudaEventCreateWithFlags(&h->compute_done, cudaEventDisableTiming), "cudaEventCreateWithFlags");

  // Rank 0 makes the id; the control communicator carries it to the others.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::int64_t ok = 1;
  std::string err;
  if (control.rank() == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      ok = 0;
      err = ncclGetErrorString(rc);
    }
  }
  if (control.size() > 1) {
    control.broadcast(&ok, 1, 0);
    control.broadcast(reinterpret_cast<char*>(&id), static_cast<std::int64_t>(sizeof id), 0);
  }
  if (!ok)
    throw backend_error("shardex::nccl::Communicator::create" + where(control) + ": ncclGetUniqueId failed on rank 0" +
                            (err.empty() ? std::string() : ": " + err),
                        0);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // non-blocking: a stuck init or call can be aborted
  const ncclResult_t rc = ncclCommInitRankConfig(&h->comm, control.size(), id, control.rank(), &config);
  Communicator c(h);
  c.finish(rc, "ncclCommInitRankConfig");
  return c;
}

const Communicator::Handle& Communicator::handle(const char* what) const {
  if (!handle_) throw error(std::string("shardex::nccl::Communicator::") + what + ": empty communicator; use create()");
  if (handle_->aborted)
    throw backend_error(std::string("shardex::nccl::Communicator::") + what + where(handle_->control) +
                            ": the communicator was aborted earlier: " + handle_->abort_reason,
                        static_cast<int>(ncclInvalidUsage));
  return *handle_;
}

int Communicator::device() const { return handle("device").device; }
const mpi::Communicator& Communicator::control() const { return handle("control").control; }
cudaStream_t Communicator::stream() const { return handle("stream").stream; }
ncclComm_t Communicator::native() const { return handle("native").comm; }
bool Communicator::aborted() const noexcept { return handle_ && handle_->aborted; }

void Communicator::abort(const std::string& reason) const {
  if (!handle_ || handle_->aborted) return;
  handle_->aborted = true;
  handle_->abort_reason = reason;
  if (handle_->comm) ncclCommAbort(handle_->comm);  // frees the communicator: never touch it again
  handle_->comm = nullptr;
}

void Communicator::begin(const char* what) const {
  const Handle& h = handle(what);
  cuda::check(cudaEventRecord(h.compute_done, cuda::compute_stream()), "cudaEventRecord (before an NCCL call)");
  cuda::check(cudaStreamWaitEvent(h.stream, h.compute_done, 0), "cudaStreamWaitEvent (before an NCCL call)");
}

void Communicator::finish(ncclResult_t rc, const char* what) const {
  const Handle& h = handle(what);  // throws if aborted: the NCCL handle is gone
  const auto fail = [&](const std::string& why) {
    const std::string msg = std::string("shardex::nccl::") + what + where(h.control) + ": " + why;
    abort(msg);
    throw backend_error(msg, static_cast<int>(rc));
  };
  if (rc != ncclSuccess && rc != ncclInProgress)
    fail(std::string(ncclGetErrorString(rc)) + " (" + ncclGetLastError(h.comm) + ")");
  // Wait for the call to be issued (non-blocking mode), then for its work on
  // the stream, watching NCCL's error state and the clock all along.
  const auto start = std::chrono::steady_clock::now();
  bool issued = false;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(h.comm, &st);
    if (q != ncclSuccess) fail(std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(q));
    if (st != ncclSuccess && st != ncclInProgress)
      fail(std::string(ncclGetErrorString(st)) + " (" + ncclGetLastError(h.comm) + ")");
    if (st == ncclSuccess) {
      issued = true;
      const cudaError_t s = cudaStreamQuery(h.stream);
      if (s == cudaSuccess) return;
      if (s != cudaErrorNotReady)
        fail(std::string("the NCCL stream reported ") + cudaGetErrorName(s) + ": " + cudaGetErrorString(s));
    }
    if (std::chrono::steady_clock::now() - start > h.timeout)
      fail(std::string("no progress after ") + std::to_string(h.timeout.count()) + " ms (" +
           (issued ? "the call is issued but its work never finished" : "the call was never issued") +
           "); a peer rank probably did not make the matching call. The communicator was aborted");
    std::this_thread::yield();
  }
}

namespace {
std::int64_t elem_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return 4;
    case ncclFloat64:
    case ncclInt64:
      return 8;
    default:
      return 1;
  }
}
}  // namespace

void Communicator::all_gather_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const {
  if (count == 0) return;  // NCCL drops count-0 collectives anyway
  detail::record_backend_call("all_gather", count * elem_bytes(t));
  begin("all_gather");
  finish(ncclAllGather(send, recv, static_cast<std::size_t>(count), t, handle_->comm, handle_->stream),
         "ncclAllGather");
}

void Communicator::reduce_scatter_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const {
  if (count == 0) return;
  detail::record_backend_call("reduce_scatter", size_ * count * elem_bytes(t));
  begin("reduce_scatter");
  finish(ncclReduceScatter(send, recv, static_cast<std::size_t>(count), t, ncclSum, handle_->comm, handle_->stream),
         "ncclReduceScatter");
}

void Communicator::all_reduce_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t,
                                  ncclRedOp_t op) const {
  if (count == 0) return;
  const char* what = op == ncclMax ? "all_reduce_max" : "all_reduce";
  detail::record_backend_call(what, count * elem_bytes(t));
  begin(what);
  finish(ncclAllReduce(send, recv, static_cast<std::size_t>(count), t, op, handle_->comm, handle_->stream),
         op == ncclMax ? "ncclAllReduce (ncclMax)" : "ncclAllReduce");
}

void Communicator::all_to_all_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t) const {
  if (count == 0) return;
  detail::record_backend_call("all_to_all", size_ * count * elem_bytes(t));
  begin("all_to_all");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 3)
  finish(ncclAlltoAll(send, recv, static_cast<std::size_t>(count), t, handle_->comm, handle_->stream), "ncclAlltoAll");
#else
  // Older NCCL: the same exchange as grouped send/receive.
  const auto elem = static_cast<std::size_t>(elem_bytes(t));
  ncclResult_t rc = ncclGroupStart();
  for (int peer = 0; rc == ncclSuccess && peer < size_; ++peer) {
    rc = ncclSend(static_cast<const char*>(send) + static_cast<std::size_t>(peer * count) * elem,
                  static_cast<std::size_t>(count), t, peer, handle_->comm, handle_->stream);
    if (rc == ncclSuccess)
      rc = ncclRecv(static_cast<char*>(recv) + static_cast<std::size_t>(peer * count) * elem,
                    static_cast<std::size_t>(count), t, peer, handle_->comm, handle_->stream);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (rc != ncclSuccess) {
    finish(rc, "ncclSend/ncclRecv (all_to_all)");
    return;
  }
  finish(end, "ncclAlltoAll (grouped send/receive)");
#endif
}

void Communicator::broadcast_raw(void* buf, std::int64_t count, ncclDataType_t t, int root) const {
  if (root < 0 || root >= size_)
    throw invalid_argument("shardex::nccl::broadcast" + where(control()) + ": root " + std::to_string(root) +
                           " out of range");
  if (count == 0) return;
  detail::record_backend_call("broadcast", root == rank_ ? count * elem_bytes(t) : 0);
  begin("broadcast");
  finish(ncclBroadcast(buf, buf, static_cast<std::size_t>(count), t, root, handle_->comm, handle_->stream),
         "ncclBroadcast");
}

// ---- Group ---------------------------------------------------------------------
Group::Group(const Communicator& c) : comm_(&c), exceptions_(std::uncaught_exceptions()) {
  c.begin("group");
  const ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) {
    open_ = false;
    c.finish(rc, "ncclGroupStart");
  }
}

Group::~Group() {
  if (!open_) return;
  if (std::uncaught_exceptions() > exceptions_) {
    // Left by an exception before end(): the calls queued so far would never be
    // matched by the peers. Close the group and abort at once, instead of
    // letting the watchdog find out minutes later.
    open_ = false;
    ncclGroupEnd();
    comm_->abort("a group of NCCL calls on rank " + std::to_string(comm_->rank()) +
                 " was left by an exception before end()");
    return;
  }
  try {
    end();
  } catch (...) {  // a destructor must not throw; end() has aborted the communicator
  }
}

void Group::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= comm_->size())
    throw invalid_argument(std::string("shardex::nccl::Group::") + what + " on rank " + std::to_string(comm_->rank()) +
                           " of " + std::to_string(comm_->size()) + ": peer " + std::to_string(peer) + " out of range");
}

void Group::check_issue(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  open_ = false;
  ncclGroupEnd();
  const std::string msg = std::string("shardex::nccl::") + what + " on rank " + std::to_string(comm_->rank()) + ": " +
                          ncclGetErrorString(rc);
  comm_->abort(msg);
  throw backend_error(msg, static_cast<int>(rc));
}

void Group::broadcast_raw(void* buf, std::int64_t count, ncclDataType_t t, int root) {
  check_peer(root, "broadcast");
  if (count == 0) return;
  detail::record_backend_call("broadcast", root == comm_->rank() ? count * elem_bytes(t) : 0);
  check_issue(ncclBroadcast(buf, buf, static_cast<std::size_t>(count), t, root, comm_->native(), comm_->stream()),
              "ncclBroadcast");
}

void Group::reduce_raw(const void* send, void* recv, std::int64_t count, ncclDataType_t t, int root) {
  check_peer(root, "reduce");
  if (count == 0) return;
  detail::record_backend_call("reduce", count * elem_bytes(t));
  check_issue(
      ncclReduce(send, recv, static_cast<std::size_t>(count), t, ncclSum, root, comm_->native(), comm_->stream()),
      "ncclReduce");
}

void Group::send_raw(const void* buf, std::int64_t count, ncclDataType_t t, int peer) {
  check_peer(peer, "send");
  if (count == 0) return;
  detail::record_backend_call("send", count * elem_bytes(t));
  check_issue(ncclSend(buf, static_cast<std::size_t>(count), t, peer, comm_->native(), comm_->stream()), "ncclSend");
}

void Group::recv_raw(void* buf, std::int64_t count, ncclDataType_t t, int peer) {
  check_peer(peer, "recv");
  if (count == 0) return;
  detail::record_backend_call("recv", 0);
  check_issue(ncclRecv(buf, static_cast<std::size_t>(count), t, peer, comm_->native(), comm_->stream()), "ncclRecv");
}

void Group::end() {
  if (!open_) return;
  open_ = false;
  comm_->finish(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace shardex::nccl
