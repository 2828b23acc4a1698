// SPDX-License-Identifier: MIT
// The host watchdog: see include/shardex/core/watchdog.hpp.
//
// One slot for the armed call (the thread that calls MPI arms it; shardex
// makes its MPI calls from one thread), read by one detached thread that
// polls it. Everything the thread touches is allocated once and never freed,
// so that it stays valid through static destruction at exit.
#include "shardex/core/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace shardex::watchdog {

namespace {

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Slot {
  std::atomic<std::int64_t> deadline_ns{0};  // 0: nothing armed
  std::atomic<const char*> call{nullptr};
  std::atomic<const char*> where{nullptr};
  std::atomic<std::int64_t> timeout_ms{0};
  std::atomic<const detail::Frame*> frame{nullptr};
  // Held while a frame is popped and while the watchdog renders one, so that
  // a frame is never rendered after its scope ended.
  std::atomic_flag frame_lock = ATOMIC_FLAG_INIT;
};

Slot& slot() {
  static Slot* s = new Slot;  // never freed: the watchdog thread may outlive statics
  return *s;
}

void lock(std::atomic_flag& f) noexcept {
  while (f.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
}
void unlock(std::atomic_flag& f) noexcept { f.clear(std::memory_order_release); }

std::string rank_label() {
  // Open MPI, MPICH and Slurm name the rank in the environment; no MPI call
  // is made from this thread.
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return std::string("rank ") + r;
  return "this process";
}

/// Ends the process with the message, unless the call armed with
/// `armed_deadline` has returned meanwhile.
void fire(Slot& s, std::int64_t armed_deadline) {
  std::string what;
  lock(s.frame_lock);
  if (s.deadline_ns.load(std::memory_order_acquire) != armed_deadline) {
    unlock(s.frame_lock);
    return;
  }
  if (const detail::Frame* f = s.frame.load(std::memory_order_acquire)) {
    try {
      what = f->describe(f->self);
    } catch (...) {
      what = "(its description failed)";
    }
  }
  unlock(s.frame_lock);
  const char* call = s.call.load();
  const char* where = s.where.load();
  const double secs = static_cast<double>(s.timeout_ms.load()) / 1000.0;
  char head[512];
  std::snprintf(head, sizeof head, "[shardex] %s: watchdog: %s on %s has not returned after %g s", rank_label().c_str(),
                call ? call : "an MPI call", where ? where : "a communicator", secs);
  std::string msg = head;
  if (!what.empty()) msg += "; it was called by " + what;
  msg +=
      ". A peer rank is not in the same call: it returned or failed before it, was killed, or called another "
      "collective (the ranks are out of step). The deadline is SHARDEX_TIMEOUT (seconds) or "
      "Communicator::set_timeout. Ending this process with exit code 124; mpirun ends the job.\n";
  // One write, so that ranks' messages do not interleave mid-line.
  ssize_t left = static_cast<ssize_t>(msg.size());
  const char* p = msg.data();
  while (left > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, static_cast<std::size_t>(left));
    if (w <= 0) break;
    left -= w, p += w;
  }
  std::_Exit(exit_code);
}

[[noreturn]] void watch() {
  Slot& s = slot();
  for (;;) {
    const std::int64_t d = s.deadline_ns.load(std::memory_order_acquire);
    const std::int64_t t = s.timeout_ms.load(std::memory_order_relaxed);
    // Poll at a tenth of the deadline, between 10 ms and 1 s: a stuck call
    // ends within its deadline plus at most a second.
    const auto poll = std::chrono::milliseconds(std::clamp<std::int64_t>(t > 0 ? t / 10 : 1000, 10, 1000));
    if (d != 0 && now_ns() > d) fire(s, d);
    std::this_thread::sleep_for(poll);
  }
}

void start_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      std::thread(watch).detach();
    } catch (...) {
      // No thread (resource limits): calls run unwatched rather than fail.
    }
  });
}

}  // namespace

std::chrono::milliseconds default_timeout() {
  static const std::chrono::milliseconds t = [] {
    if (const char* v = std::getenv("SHARDEX_TIMEOUT")) {
      char* end = nullptr;
      const double secs = std::strtod(v, &end);
      if (end != v && secs > 0) return std::chrono::milliseconds(static_cast<std::int64_t>(secs * 1000.0));
    }
    return std::chrono::milliseconds(std::chrono::seconds(300));
  }();
  return t;
}

Armed::Armed(const char* call, const char* where, std::chrono::milliseconds timeout) noexcept {
  start_once();
  Slot& s = slot();
  previous_deadline_ = s.deadline_ns.load(std::memory_order_relaxed);
  previous_call_ = s.call.load(std::memory_order_relaxed);
  previous_where_ = s.where.load(std::memory_order_relaxed);
  previous_timeout_ms_ = s.timeout_ms.load(std::memory_order_relaxed);
  s.call.store(call, std::memory_order_relaxed);
  s.where.store(where, std::memory_order_relaxed);
  s.timeout_ms.store(timeout.count(), std::memory_order_relaxed);
  s.deadline_ns.store(now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(),
                      std::memory_order_release);
}

Armed::~Armed() {
  Slot& s = slot();
  // Disarm under the frame lock: the watchdog re-checks the deadline under it.
  lock(s.frame_lock);
  s.deadline_ns.store(0, std::memory_order_release);
  unlock(s.frame_lock);
  s.call.store(previous_call_, std::memory_order_relaxed);
  s.where.store(previous_where_, std::memory_order_relaxed);
  s.timeout_ms.store(previous_timeout_ms_, std::memory_order_relaxed);
  if (previous_deadline_ != 0) s.deadline_ns.store(previous_deadline_, std::memory_order_release);
}

namespace detail {
void push(Frame* f) noexcept {
  Slot& s = slot();
  f->previous = s.frame.load(std::memory_order_relaxed);
  s.frame.store(f, std::memory_order_release);
}
void pop(Frame* f) noexcept {
  Slot& s = slot();
  lock(s.frame_lock);
  s.frame.store(f->previous, std::memory_order_release);
  unlock(s.frame_lock);
}
}  // namespace detail

}  // namespace shardex::watchdog
