// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The host watchdog: every blocking MPI call is armed with a deadline,
/// and a rank whose call has not returned by then prints which call it was
/// waiting in (on which communicator, for which shardex operation, with its
/// layouts and lengths) and ends with exit code 124 instead of hanging.
///
/// Why a thread and not non-blocking calls waited with a deadline: Open MPI's
/// non-blocking collectives are a different (sometimes slower) implementation,
/// and the blocking ones stay exactly the calls the benchmark measures. Arming
/// costs a clock read and a few atomic stores (bench/collectives measures the
/// watched calls against the raw ones). The thread makes no MPI call: it ends
/// its own process, and mpirun then ends the job (about 1.5 s here).
///
/// The deadline is per communicator (`mpi::Communicator::set_timeout`); its
/// default is `SHARDEX_TIMEOUT` seconds from the environment, else 300 s.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace shardex::watchdog {

/// The deadline a new communicator starts with: SHARDEX_TIMEOUT (seconds,
/// fractions allowed, read once) when set to a positive number, else 300 s.
std::chrono::milliseconds default_timeout();

/// The exit code of a rank the watchdog ends.
inline constexpr int exit_code = 124;

/// Arms the watchdog for the scope of one blocking call: if the scope is still
/// open `timeout` after it began, the process prints `call`, `where` and the
/// innermost open `Scope`'s description, then ends. Scopes nest (the outer
/// deadline comes back when the inner one ends). Not copyable.
class Armed {
public:
  /// `call` and `where` must outlive the scope (string literals, or a
  /// communicator's description).
  Armed(const char* call, const char* where, std::chrono::milliseconds timeout) noexcept;
  ~Armed();
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

private:
  std::int64_t previous_deadline_;
  const char* previous_call_;
  const char* previous_where_;
  std::int64_t previous_timeout_ms_;
};

namespace detail {
/// One open description scope: a function that renders it on demand.
struct Frame {
  std::string (*describe)(const void* self);
  const void* self;
  const Frame* previous;
};
void push(Frame* f) noexcept;
void pop(Frame* f) noexcept;
}  // namespace detail

/// Names what the calling code is doing (e.g. "shardex::all_gather of float
/// S(0)[1,2,3,4] -> R, global shape (10, 3)") for the watchdog's message. The
/// text is built only if the watchdog fires, by `describe` (called on the
/// watchdog's thread while this thread is blocked in the armed call).
template <class Describe>
class Scope {
public:
  /// Opens the scope; `describe()` renders its text (keep what it captures alive).
  explicit Scope(Describe describe) noexcept : describe_(std::move(describe)), frame_{&Scope::render, this, nullptr} {
    detail::push(&frame_);
  }
  ~Scope() { detail::pop(&frame_); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

private:
  static std::string render(const void* self) { return static_cast<const Scope*>(self)->describe_(); }
  Describe describe_;
  detail::Frame frame_;
};

}  // namespace shardex::watchdog
