// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Parallel file I/O of boxes of row-major arrays: every rank writes
/// (or reads) its own box of each array straight at its place in one file,
/// in one collective call per array (MPI-IO: `MPI_File_write_all` through a
/// subarray file view, the derived datatype that makes a box strided in the
/// file one request). Without MPI, the one-rank world does the same with
/// plain positioned reads and writes. Compiled once (src/mpi_file.cpp,
/// src/serial_file.cpp).
///
/// Errors are agreed: a file that cannot be opened, written, read or renamed
/// on any rank throws `shardex::error` on every rank, naming the file.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardex/backend/mpi/communicator.hpp"

namespace shardex::io {

/// A box of a row-major array stored in a file: the array starts at byte
/// `offset`, has `extents` (elements of `elem_bytes` bytes each); the box
/// starts at `start` and spans `count` elements per dim. An empty box (a
/// zero count) moves nothing. A 0-d array is one element.
struct FileBox {
  /// The array's first byte in the file.
  std::int64_t offset = 0;
  /// Bytes per element.
  int elem_bytes = 4;
  ///@{
  /// The array's extents, the box's first index and its extent, per dim.
  std::vector<std::int64_t> extents, start, count;
  ///@}

  /// The number of elements in the box.
  [[nodiscard]] std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto c : count) n *= c;
    return n;
  }
};

/// Collective over `comm`, whatever the check level (file operations must
/// never leave a rank waiting): throws `invalid_argument` on every rank if
/// any rank's `local_error` is non-empty (that rank's text) or if the ranks'
/// `signature`s differ (each rank's `call` text, naming the ranks by call).
void agree_always(const mpi::Communicator& comm, const std::string& local_error, std::int64_t signature,
                  const std::string& call);

/// Collective over `comm`: writes `path` whole, atomically. The file is
/// written under a temporary name next to `path` (rank 0 writes `prefix` at
/// byte 0; every rank writes `data[k]`, the box `boxes[k]` as a contiguous
/// buffer, for every k, in one collective call per k), its size set to
/// `total_bytes`, closed, and only then renamed to `path` by rank 0. On any
/// failure the temporary file is removed and `path`, if it existed, is left
/// as it was.
void write_boxes(const mpi::Communicator& comm, const std::string& path, std::string_view prefix,
                 std::int64_t total_bytes, std::span<const FileBox> boxes, std::span<const void* const> data);

/// Collective: the first `n` bytes of `path` (fewer if the file is shorter)
/// and the file's size, read by rank 0 and broadcast, so that every rank
/// parses the same bytes and fails alike.
struct FileHead {
  /// The first bytes.
  std::string bytes;
  /// The file's size in bytes.
  std::int64_t size = 0;
};
/// The FileHead of `path` (see FileHead).
/// @throws shardex::error on every rank if rank 0 cannot read the file.
FileHead read_head(const mpi::Communicator& comm, const std::string& path, std::int64_t n);

/// Collective: every rank reads its box `boxes[k]` into `data[k]` (a
/// contiguous buffer), one collective call per k.
void read_boxes(const mpi::Communicator& comm, const std::string& path, std::span<const FileBox> boxes,
                std::span<void* const> data);

}  // namespace shardex::io
