// SPDX-License-Identifier: MIT
// The host memory pool (include/shardex/device/host/memory_pool.hpp): a map
// from size class to free blocks, under one mutex.
#include "shardex/device/host/memory_pool.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardex::host {

namespace {

constexpr std::size_t alignment = 64;

/// Rounds up to a size class: multiples of 256 B below 64 KiB, above that
/// eight classes per power of two (at most 12.5 % waste).
std::size_t size_class(std::size_t bytes) {
  if (bytes <= 65536) return (bytes + 255) / 256 * 256;
  std::size_t top = 65536;
  while (top < bytes) top <<= 1;
  const std::size_t step = top / 16;  // classes top/2 + k * top/16, k = 1..8
  return (bytes + step - 1) / step * step;
}

std::int64_t limit_from_environment() {
  if (const char* v = std::getenv("SHARDEX_HOST_POOL_MIB")) {
    try {
      return std::stoll(v) << 20;
    } catch (...) {  // an unreadable value keeps the default
    }
  }
  return std::int64_t(1024) << 20;
}

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;
  PoolStats stats{0, 0, limit_from_environment(), 0, 0};

  void trim_to(std::int64_t limit) {  // under the mutex
    for (auto it = free_blocks.begin(); it != free_blocks.end() && stats.cached_bytes > limit; ++it) {
      while (!it->second.empty() && stats.cached_bytes > limit) {
        std::free(it->second.back());
        it->second.pop_back();
        stats.cached_bytes -= static_cast<std::int64_t>(it->first);
      }
    }
  }
};

// Never destroyed: tensors in static storage may give memory back after main.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void* pool_acquire(std::size_t bytes) {
  const std::size_t cls = size_class(bytes == 0 ? 1 : bytes);
  Pool& p = pool();
  {
    std::lock_guard lock(p.mutex);
    auto it = p.free_blocks.find(cls);
    if (it != p.free_blocks.end() && !it->second.empty()) {
      void* b = it->second.back();
      it->second.pop_back();
      p.stats.cached_bytes -= static_cast<std::int64_t>(cls);
      p.stats.in_use_bytes += static_cast<std::int64_t>(cls);
      ++p.stats.hits;
      return b;
    }
    ++p.stats.misses;
    p.stats.in_use_bytes += static_cast<std::int64_t>(cls);
  }
  void* b = std::aligned_alloc(alignment, cls);  // cls is a multiple of 256, hence of the alignment
  if (b == nullptr) {
    {
      std::lock_guard lock(p.mutex);
      p.trim_to(0);  // give the cache back to the system and try once more
    }
    b = std::aligned_alloc(alignment, cls);
    if (b == nullptr) {
      std::lock_guard lock(p.mutex);
      p.stats.in_use_bytes -= static_cast<std::int64_t>(cls);
      throw std::bad_alloc();
    }
  }
  return b;
}

void pool_give_back(void* b, std::size_t bytes) noexcept {
  if (b == nullptr) return;
  const std::size_t cls = size_class(bytes == 0 ? 1 : bytes);
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  p.stats.in_use_bytes -= static_cast<std::int64_t>(cls);
  if (p.stats.cached_bytes + static_cast<std::int64_t>(cls) > p.stats.limit_bytes) {
    std::free(b);
    return;
  }
  try {
    p.free_blocks[cls].push_back(b);
    p.stats.cached_bytes += static_cast<std::int64_t>(cls);
  } catch (...) {  // no memory for the bookkeeping: free the block instead
    std::free(b);
  }
}

void pool_release() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  p.trim_to(0);
}

void pool_set_limit(std::int64_t bytes) noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  p.stats.limit_bytes = bytes < 0 ? 0 : bytes;
  p.trim_to(p.stats.limit_bytes);
}

bool keep_freed_memory() noexcept {
  const char* opt_out = std::getenv("SHARDEX_MALLOC_DEFAULTS");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") != 0) return false;
#if defined(__GLIBC__)
  // A fixed threshold also stops glibc's dynamic one from sliding back down.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1;
#else
  return false;
#endif
}

PoolStats pool_stats() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.stats;
}

}  // namespace shardex::host
