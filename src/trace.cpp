// SPDX-License-Identifier: MIT
// The timeline trace (core/trace.hpp): a per-process buffer of complete
// events, and the merge at stop(): every rank's events as JSON text, gathered
// on rank 0 of MPI_COMM_WORLD (or this process alone without MPI) and written
// as one Chrome trace event file.
#include "shardex/core/trace.hpp"
#include "shardex/device/host/gemm_kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <vector>

#include "json_text.hpp"
#include "shardex/config.hpp"
#include "shardex/core/error.hpp"

#if SHARDEX_WITH_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

namespace shardex::trace {

namespace {
struct Event {
  const char* category;
  std::string name;
  std::int64_t start_ns, duration_ns;
  std::string args;
};

struct State {
  std::mutex mutex;
  std::vector<Event> events;
  std::string path;
  std::int64_t clock_offset_ns = 0;  // add to this rank's clock to get rank 0's
};
State& state() {
  static State s;
  return s;
}

int world_rank() {
#if SHARDEX_WITH_MPI
  int initialized = 0, finalized = 0, r = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
#else
  return 0;
#endif
}

/// This rank's events as JSON objects, comma-separated, timestamps in
/// microseconds on rank 0's clock, relative to `origin_ns`.
std::string events_json(int rank, std::int64_t origin_ns) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::string out;
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                rank, rank);
  out += buf;
  std::snprintf(buf, sizeof buf,
                ",{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", rank, rank);
  out += buf;
  for (const Event& e : s.events) {
    out += ",{\"name\":" + shardex::detail::json_quoted(e.name, false);
    std::snprintf(buf, sizeof buf, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f",
                  e.category, rank, double(e.start_ns + s.clock_offset_ns - origin_ns) / 1e3,
                  double(e.duration_ns) / 1e3);
    out += buf;
    out += ",\"args\":{" + e.args + "}}";
  }
  return out;
}
}  // namespace

namespace detail {
void record(const char* category, std::string name, std::int64_t start_ns, std::int64_t duration_ns,
            std::string args_json) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.events.push_back({category, std::move(name), start_ns, duration_ns, std::move(args_json)});
}
}  // namespace detail

std::string json_string_member(const char* key, const std::string& value) {
  return shardex::detail::json_quoted(key, false) + ":" + shardex::detail::json_quoted(value, false);
}

void start(const std::string& path) {
  if (path.empty()) throw invalid_argument("shardex::trace::start: the path is empty");
  State& s = state();
  if (enabled()) throw error("shardex::trace::start(" + path + "): a trace to " + s.path + " is already running");
  std::int64_t offset = 0;
#if SHARDEX_WITH_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw error("shardex::trace::start: MPI is not initialized; construct a shardex::mpi::Environment first");
  // Every rank leaves the barrier at nearly the same moment: take rank 0's
  // clock reading there as everyone's (a few microseconds of skew).
  MPI_Barrier(MPI_COMM_WORLD);
  const std::int64_t mine = detail::now_ns();
  std::int64_t zero = mine;
  MPI_Bcast(&zero, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  offset = zero - mine;
#endif
  {
    std::lock_guard lock(s.mutex);
    s.events.clear();
    s.path = path;
    s.clock_offset_ns = offset;
  }
  detail::enabled_flag().store(true);
}

std::int64_t stop() {
  State& s = state();
  if (!enabled()) return 0;
  detail::enabled_flag().store(false);
  const int rank = world_rank();
  std::int64_t origin = 0;  // the earliest event on rank 0's clock: the file starts at 0
  {
    std::lock_guard lock(s.mutex);
    origin = s.events.empty() ? detail::now_ns() + s.clock_offset_ns : s.events.front().start_ns + s.clock_offset_ns;
    for (const Event& e : s.events) origin = std::min(origin, e.start_ns + s.clock_offset_ns);
  }
  std::int64_t count = 0;
  {
    std::lock_guard lock(s.mutex);
    count = static_cast<std::int64_t>(s.events.size());
  }
  std::string mine;
#if SHARDEX_WITH_MPI
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(MPI_IN_PLACE, &origin, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  // Every rank's text is non-empty (its process name): ranks after 0 lead with the comma.
  mine = (rank == 0 ? "" : ",") + events_json(rank, origin);
  // MPI's counts are ints: a trace over 2 GiB of text is not merged (one agreed verdict).
  std::int64_t mine_len = static_cast<std::int64_t>(mine.size()), total = mine_len;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (total > 2147483647) {
    {
      std::lock_guard lock(s.mutex);
      s.events.clear();
    }
    if (rank == 0)
      std::fprintf(
          stderr,
          "[shardex] trace: %lld bytes of events, more than one MPI call can gather; %s not written (trace a shorter part with trace::start/stop)\n",
          static_cast<long long>(total), s.path.c_str());
    return 0;
  }
  const int len = static_cast<int>(mine_len);
  std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int at = 0;
    for (int r = 0; r < size; ++r) displs[static_cast<std::size_t>(r)] = at, at += lens[static_cast<std::size_t>(r)];
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::int64_t events_total = count;
  MPI_Reduce(&count, &events_total, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    mine.swap(all);
    count = events_total;
  }
#else
  mine = events_json(rank, origin);
#endif
  {
    std::lock_guard lock(s.mutex);
    s.events.clear();
    s.events.shrink_to_fit();
  }
  if (rank == 0) {
    std::ofstream out(s.path);
    // The run's GEMM kernel per shape class (the same on every rank: agreed at start-up, or by
    // tune_gemm_kernels), as it stands when the trace is written.
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"shardex\"," << host::gemm_kernels_json()
        << "},\"traceEvents\":[" << mine << "]}\n";
    if (!out) std::fprintf(stderr, "[shardex] trace: cannot write %s\n", s.path.c_str());
  }
  return count;
}

void start_from_environment() {
  const char* env = std::getenv("SHARDEX_TRACE");
  std::string path = env ? env : "";
#if SHARDEX_WITH_MPI
  // Rank 0's setting counts: mpirun does not pass every variable to other
  // hosts, and ranks that disagreed would meet in different collectives.
  std::int64_t len = static_cast<std::int64_t>(path.size());
  MPI_Bcast(&len, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  path.resize(static_cast<std::size_t>(len));
  MPI_Bcast(path.data(), static_cast<int>(len), MPI_CHAR, 0, MPI_COMM_WORLD);
#endif
  if (path.empty() || enabled()) return;
  start(path);
}

}  // namespace shardex::trace
