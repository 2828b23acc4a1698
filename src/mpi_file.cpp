// SPDX-License-Identifier: MIT
// Parallel file I/O over MPI-IO (include/shardex/io/file.hpp): one subarray
// file view per box, one collective write or read per array.
#include "shardex/io/file.hpp"

#include <mpi.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdio>
#include <string>

#include "shardex/core/agree.hpp"
#include "shardex/core/error.hpp"

namespace shardex::io {

// The data is written as the machine holds it ("native"): safetensors is little-endian.
static_assert(std::endian::native == std::endian::little, "shardex: checkpoints assume a little-endian machine");

namespace {

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

/// Every rank throws `error` if any rank's `err` is non-empty: a file error
/// on one rank must never leave the others waiting.
void agreed(const mpi::Communicator& comm, const std::string& err) {
  bool differ = false;
  if (std::string msg = detail::first_error(comm, err, 0, differ); !msg.empty()) throw error(msg);
}

/// The file view of one box: the box as a subarray of the array, in
/// elements of `elem` (a contiguous type of elem_bytes bytes). An empty box
/// (or an array too large for MPI's int counts) gets a plain view: nothing is moved.
struct View {
  MPI_Datatype elem = MPI_DATATYPE_NULL, file = MPI_DATATYPE_NULL;
  int count = 0;
  std::string problem;
  explicit View(const FileBox& b) {
    MPI_Type_contiguous(b.elem_bytes, MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    const std::int64_t n = b.elements();
    if (n > INT_MAX) problem = "a piece of " + std::to_string(n) + " elements is more than one MPI-IO call can move";
    for (auto e : b.extents)
      if (e > INT_MAX)
        problem = "an extent of " + std::to_string(e) + " elements is more than MPI-IO's int can describe";
    if (n == 0 || !problem.empty()) {
      file = elem;
      return;
    }
    count = static_cast<int>(n);
    if (b.extents.empty()) {  // a 0-d array: one element
      file = elem;
      return;
    }
    std::vector<int> sizes, subsizes, starts;
    for (std::size_t d = 0; d < b.extents.size(); ++d) {
      sizes.push_back(static_cast<int>(b.extents[d]));
      subsizes.push_back(static_cast<int>(b.count[d]));
      starts.push_back(static_cast<int>(b.start[d]));
    }
    MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(), starts.data(), MPI_ORDER_C,
                             elem, &file);
    MPI_Type_commit(&file);
  }
  ~View() {
    if (file != MPI_DATATYPE_NULL && file != elem) MPI_Type_free(&file);
    if (elem != MPI_DATATYPE_NULL) MPI_Type_free(&elem);
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;
};

/// One collective transfer per box: every rank sets its view and moves its
/// box (an empty one moves nothing but still takes part).
template <class Transfer>
std::string transfer_boxes(MPI_File fh, std::span<const FileBox> boxes, Transfer&& transfer) {
  std::string err;
  for (std::size_t k = 0; k < boxes.size(); ++k) {
    View v(boxes[k]);
    if (err.empty() && !v.problem.empty()) err = v.problem;
    int rc = MPI_File_set_view(fh, boxes[k].offset, v.elem, v.file, "native", MPI_INFO_NULL);
    if (rc != MPI_SUCCESS && err.empty()) err = "MPI_File_set_view: " + mpi_error_text(rc);
    MPI_Status st;
    rc = transfer(fh, k, v.problem.empty() ? v.count : 0, v.elem, &st);
    if (rc != MPI_SUCCESS && err.empty()) err = mpi_error_text(rc);
  }
  return err;
}

std::string where(const mpi::Communicator& comm) {
  return " on rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
}

}  // namespace

void agree_always(const mpi::Communicator& comm, const std::string& local_error, std::int64_t signature,
                  const std::string& call) {
  bool differ = false;
  if (std::string msg = detail::first_error(comm, local_error, signature, differ); !msg.empty())
    throw invalid_argument(msg);
  if (differ)
    throw invalid_argument(
        call + ": the ranks are not making the same call (the tensors, names, shapes or file differ across ranks)");
}

void write_boxes(const mpi::Communicator& comm, const std::string& path, std::string_view prefix,
                 std::int64_t total_bytes, std::span<const FileBox> boxes, std::span<const void* const> data) {
  const std::string tmp = path + ".shardex-partial";
  const std::string what = "shardex::save(\"" + path + "\")" + where(comm);
  // A stale temporary file from a crashed run is replaced, not appended to.
  if (comm.rank() == 0) MPI_File_delete(tmp.c_str(), MPI_INFO_NULL);
  comm.barrier();
  MPI_File fh = MPI_FILE_NULL;
  int rc = MPI_File_open(comm.native(), tmp.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
  agreed(comm, rc == MPI_SUCCESS ? "" : what + ": cannot create \"" + tmp + "\": " + mpi_error_text(rc));
  std::string err;
  rc = MPI_File_set_size(fh, total_bytes);
  if (rc != MPI_SUCCESS) err = "MPI_File_set_size: " + mpi_error_text(rc);
  if (comm.rank() == 0 && !prefix.empty()) {
    MPI_Status st;
    rc = MPI_File_write_at(fh, 0, prefix.data(), static_cast<int>(prefix.size()), MPI_BYTE, &st);
    if (rc != MPI_SUCCESS && err.empty()) err = "writing the header: " + mpi_error_text(rc);
  }
  const std::string moved =
      transfer_boxes(fh, boxes, [&](MPI_File f, std::size_t k, int count, MPI_Datatype t, MPI_Status* st) {
        return MPI_File_write_all(f, data[k], count, t, st);
      });
  if (err.empty() && !moved.empty()) err = "writing the data: " + moved;
  rc = MPI_File_sync(fh);  // on the storage before the file takes its name
  if (rc != MPI_SUCCESS && err.empty()) err = "MPI_File_sync: " + mpi_error_text(rc);
  rc = MPI_File_close(&fh);
  if (rc != MPI_SUCCESS && err.empty()) err = "closing: " + mpi_error_text(rc);
  const std::string problem = err.empty() ? "" : what + ": " + err;
  try {
    agreed(comm, problem);
  } catch (...) {
    if (comm.rank() == 0) MPI_File_delete(tmp.c_str(), MPI_INFO_NULL);
    throw;
  }
  // Every rank has closed the file: now it takes its name, at once.
  std::string renamed;
  if (comm.rank() == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) {
    renamed = what + ": cannot rename \"" + tmp + "\" to \"" + path + "\"";
    MPI_File_delete(tmp.c_str(), MPI_INFO_NULL);
  }
  agreed(comm, renamed);
}

FileHead read_head(const mpi::Communicator& comm, const std::string& path, std::int64_t n) {
  FileHead head;
  std::string err;
  if (comm.rank() == 0) {
    MPI_File fh = MPI_FILE_NULL;
    int rc = MPI_File_open(MPI_COMM_SELF, path.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
      err = "cannot open \"" + path + "\": " + mpi_error_text(rc);
    } else {
      MPI_Offset size = 0;
      MPI_File_get_size(fh, &size);
      head.size = size;
      head.bytes.resize(static_cast<std::size_t>(std::min<std::int64_t>(n, size)));
      MPI_Status st;
      rc = MPI_File_read_at(fh, 0, head.bytes.data(), static_cast<int>(head.bytes.size()), MPI_BYTE, &st);
      if (rc != MPI_SUCCESS) err = "cannot read \"" + path + "\": " + mpi_error_text(rc);
      MPI_File_close(&fh);
    }
  }
  agreed(comm, err.empty() ? "" : "shardex::load" + where(comm) + ": " + err);
  std::int64_t meta[2] = {head.size, static_cast<std::int64_t>(head.bytes.size())};
  comm.broadcast(meta, 2, 0);
  head.size = meta[0];
  head.bytes.resize(static_cast<std::size_t>(meta[1]));
  comm.broadcast(head.bytes.data(), meta[1], 0);
  return head;
}

void read_boxes(const mpi::Communicator& comm, const std::string& path, std::span<const FileBox> boxes,
                std::span<void* const> data) {
  MPI_File fh = MPI_FILE_NULL;
  int rc = MPI_File_open(comm.native(), path.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
  agreed(comm, rc == MPI_SUCCESS
                   ? ""
                   : "shardex::load" + where(comm) + ": cannot open \"" + path + "\": " + mpi_error_text(rc));
  std::string err =
      transfer_boxes(fh, boxes, [&](MPI_File f, std::size_t k, int count, MPI_Datatype t, MPI_Status* st) {
        const int rc2 = MPI_File_read_all(f, data[k], count, t, st);
        int got = 0;
        if (rc2 == MPI_SUCCESS && MPI_Get_count(st, t, &got) == MPI_SUCCESS && got != count)
          return MPI_ERR_TRUNCATE;  // a file shorter than its header says
        return rc2;
      });
  rc = MPI_File_close(&fh);
  if (rc != MPI_SUCCESS && err.empty()) err = "closing: " + mpi_error_text(rc);
  agreed(comm, err.empty() ? "" : "shardex::load(\"" + path + "\")" + where(comm) + ": " + err);
}

}  // namespace shardex::io
