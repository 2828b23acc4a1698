// SPDX-License-Identifier: MIT
// Threads of the host's local math (include/shardex/device/host/threads.hpp).
#include "shardex/device/host/threads.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

namespace shardex::host {

namespace {
int from_environment() {
  if (const char* v = std::getenv("SHARDEX_THREADS")) {
    try {
      const int n = std::stoi(v);
      if (n >= 1) return n;
    } catch (...) {  // unreadable: the default
    }
  }
  return 1;
}

std::atomic<int>& count() {
  static std::atomic<int> n{from_environment()};
  return n;
}
}  // namespace

void set_threads(int n) noexcept { count().store(n < 1 ? 1 : n); }
int threads() noexcept { return count().load(std::memory_order_relaxed); }

}  // namespace shardex::host
