// SPDX-License-Identifier: MIT
// Parallel file I/O for the one-rank world (no MPI; include/shardex/io/file.hpp):
// the same files, written and read with positioned standard-library calls.
#include "shardex/io/file.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "shardex/core/error.hpp"

namespace shardex::io {

namespace {

/// Calls f(file byte offset, buffer byte offset, bytes) for every contiguous
/// run of a box, in order.
template <class F>
void for_each_run(const FileBox& b, F&& f) {
  const std::int64_t n = b.elements();
  if (n == 0) return;
  const std::size_t dims = b.extents.size();
  if (dims == 0) {
    f(b.offset, 0, b.elem_bytes);
    return;
  }
  const std::int64_t run = b.count[dims - 1];
  std::vector<std::int64_t> idx(dims, 0);  // the box-relative index of the run's first element
  for (std::int64_t done = 0; done < n; done += run) {
    std::int64_t lin = 0;
    for (std::size_t d = 0; d < dims; ++d) lin = lin * b.extents[d] + b.start[d] + idx[d];
    f(b.offset + lin * b.elem_bytes, done * b.elem_bytes, run * b.elem_bytes);
    for (std::size_t d = dims - 1; d-- > 0;) {  // next run: the last dim is covered by the run
      if (++idx[d] < b.count[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void agree_always(const mpi::Communicator&, const std::string& local_error, std::int64_t, const std::string&) {
  if (!local_error.empty()) throw invalid_argument(local_error);
}

void write_boxes(const mpi::Communicator&, const std::string& path, std::string_view prefix, std::int64_t total_bytes,
                 std::span<const FileBox> boxes, std::span<const void* const> data) {
  const std::string tmp = path + ".shardex-partial";
  const std::string what = "shardex::save(\"" + path + "\")";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw error(what + ": cannot create \"" + tmp + "\"");
    std::string zeros(static_cast<std::size_t>(total_bytes), '\0');
    zeros.replace(0, prefix.size(), prefix);
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    for (std::size_t k = 0; k < boxes.size(); ++k)
      for_each_run(boxes[k], [&](std::int64_t at, std::int64_t from, std::int64_t bytes) {
        out.seekp(at);
        out.write(static_cast<const char*>(data[k]) + from, bytes);
      });
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw error(what + ": writing \"" + tmp + "\" failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw error(what + ": cannot rename \"" + tmp + "\" to \"" + path + "\"");
  }
}

FileHead read_head(const mpi::Communicator&, const std::string& path, std::int64_t n) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw error("shardex::load: cannot open \"" + path + "\"");
  FileHead head;
  head.size = static_cast<std::int64_t>(in.tellg());
  head.bytes.resize(static_cast<std::size_t>(std::min(n, head.size)));
  in.seekg(0);
  in.read(head.bytes.data(), static_cast<std::streamsize>(head.bytes.size()));
  if (!in) throw error("shardex::load: cannot read \"" + path + "\"");
  return head;
}

void read_boxes(const mpi::Communicator&, const std::string& path, std::span<const FileBox> boxes,
                std::span<void* const> data) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("shardex::load: cannot open \"" + path + "\"");
  for (std::size_t k = 0; k < boxes.size(); ++k)
    for_each_run(boxes[k], [&](std::int64_t at, std::int64_t to, std::int64_t bytes) {
      in.seekg(at);
      in.read(static_cast<char*>(data[k]) + to, bytes);
    });
  if (!in) throw error("shardex::load(\"" + path + "\"): reading failed");
}

}  // namespace shardex::io
