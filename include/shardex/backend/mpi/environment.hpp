// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief RAII set-up and tear-down of MPI. Construct one in `main` before any
/// communicator; its destructor finalizes MPI (unless MPI was already
/// initialized by someone else, in which case it leaves MPI alone).
/// In a build without MPI (SHARDEX_WITH_MPI 0) it initializes nothing; it
/// only makes `active()` true while it lives (`Communicator::world()` needs it).
/// Either way it first tunes malloc to keep freed memory for reuse
/// (`host::keep_freed_memory`, device/host/memory_pool.hpp; opt out with
/// SHARDEX_MALLOC_DEFAULTS=1).

namespace shardex::mpi {

/// Initializes MPI for its lifetime (see the file's note); one per process, in main.
class Environment {
public:
  /// MPI_Init with main's arguments unless MPI is initialized already (a build
  /// without MPI initializes nothing).
  /// @throws backend_error if MPI_Init fails.
  Environment(int& argc, char**& argv);
  Environment();
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  /// Whether MPI is initialized and not yet finalized.
  static bool active() noexcept;

private:
  bool owns_ = false;
};

}  // namespace shardex::mpi
