// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief A timeline trace of a run: every transition (collective or local),
/// every evaluated expression and every backward step, per rank, merged at the
/// end into one Chrome trace event file that Perfetto (ui.perfetto.dev) and
/// chrome://tracing open: one process per rank, the ranks' clocks aligned.
///
/// @code
/// SHARDEX_TRACE=run.json mpirun -n 4 build/examples/megatron_mlp   // the whole run, written at exit
/// shardex::trace::start("step.json");  ...  shardex::trace::stop();  // or a part of it (collective calls)
/// @endcode
///
/// Off, a span costs one relaxed atomic load. On, each records a name, a
/// category ("collective", "local", "eval", "backward"), its start and length
/// and, for transitions, the layouts, lengths, strategy, bytes and communicator.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace shardex::trace {

namespace detail {
inline std::atomic<bool>& enabled_flag() noexcept {
  static std::atomic<bool> on{false};
  return on;
}
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
/// Adds one complete event to this process's buffer (library-defined).
void record(const char* category, std::string name, std::int64_t start_ns, std::int64_t duration_ns,
            std::string args_json);
}  // namespace detail

/// Whether spans are being recorded now.
inline bool enabled() noexcept { return detail::enabled_flag().load(std::memory_order_relaxed); }

/// Starts recording on every rank of MPI_COMM_WORLD, aligning the ranks'
/// clocks to rank 0's (one barrier and one broadcast); `path` is where stop()
/// writes. Collective. Throws if a trace is already running.
void start(const std::string& path);

/// Stops recording, gathers every rank's events on rank 0 and writes the
/// Chrome trace JSON to the path given to start(); returns the number of
/// events written (on rank 0; elsewhere this rank's count). Collective.
/// Environment's destructor calls it when SHARDEX_TRACE started a trace.
std::int64_t stop();

/// Starts a trace if SHARDEX_TRACE names a file (Environment's constructor calls it).
void start_from_environment();

/// One timed event: recorded when it ends, if tracing was on when it began.
class Span {
public:
  /// Begins the event `name` of `category` (both must outlive the Span).
  Span(const char* category, const char* name) noexcept : category_(category), name_(name), on_(enabled()) {
    if (on_) start_ = detail::now_ns();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() {
    if (on_)
      detail::record(category_, name_ ? std::string(name_) : std::string(), start_, detail::now_ns() - start_,
                     std::move(args_));
  }
  /// Whether the event is being recorded (tracing was on when it began).
  [[nodiscard]] bool on() const noexcept { return on_; }
  /// The event's "args" (a JSON object's members, without braces), set only when on.
  void set_args(std::string json_members) {
    if (on_) args_ = std::move(json_members);
  }

private:
  const char* category_;
  const char* name_;
  bool on_;
  std::int64_t start_ = 0;
  std::string args_;
};

/// `"key": "value"` with the value escaped for JSON.
std::string json_string_member(const char* key, const std::string& value);

}  // namespace shardex::trace
