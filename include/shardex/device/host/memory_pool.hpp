// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The host memory pool: storage of tensors and lowering buffers is
/// reused instead of being returned to the system.
///
/// Why: fresh memory is expensive. A large `malloc` is a fresh `mmap`, whose
/// pages fault on first touch, and MPI's shared-memory transport handles new
/// buffers slowly; an in-place MPI_Allreduce of 1 MiB on a just-allocated
/// buffer measured 10x slower than on a reused one (docs/performance.md). A training
/// step allocates the same sizes every step, so a cache keyed by size class
/// makes its allocations after the first step hits.
///
/// Blocks are 64-byte aligned and rounded up to a size class (at most 1/8
/// waste). A freed block is cached unless the cache would then exceed the
/// limit (`SHARDEX_HOST_POOL_MIB` at start-up, default 1024 MiB per process;
/// `set_limit`); `release()` frees every cached block. Thread-safe.

#include <cstddef>
#include <cstdint>

namespace shardex::host {

/// The host memory pool's counters (pool_stats()).
struct PoolStats {
  std::int64_t cached_bytes = 0;  ///< held by the pool, free for reuse
  std::int64_t in_use_bytes = 0;  ///< handed out and not yet given back
  std::int64_t limit_bytes = 0;   ///< most the pool caches
  std::int64_t hits = 0;          ///< acquisitions served from the cache
  std::int64_t misses = 0;        ///< acquisitions that went to the system
};

/// `bytes` of 64-byte aligned storage (uninitialized), from the cache when a
/// block of the same size class is free. Throws std::bad_alloc.
void* pool_acquire(std::size_t bytes);
/// Gives back a block from pool_acquire with the same `bytes`.
void pool_give_back(void* p, std::size_t bytes) noexcept;
/// Frees every cached block (blocks in use are unaffected).
void pool_release() noexcept;
/// The most bytes the pool keeps cached; lowering it releases the excess.
void pool_set_limit(std::int64_t bytes) noexcept;
/// The pool's counters now.
PoolStats pool_stats() noexcept;

/// Makes glibc's malloc keep freed memory for reuse (a 32 MiB mmap threshold,
/// a 512 MiB trim threshold) instead of unmapping it, so that the buffers
/// Eigen's GEMM allocates on every product do not page-fault on every step.
/// `mpi::Environment` calls it unless `SHARDEX_MALLOC_DEFAULTS=1` is set;
/// without glibc it does nothing. Returns whether the settings were applied.
bool keep_freed_memory() noexcept;

}  // namespace shardex::host
