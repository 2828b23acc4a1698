// SPDX-License-Identifier: MIT
// A libFuzzer target for the safetensors reader (test/fuzz/run_fuzzer.py builds
// and runs it): every input is a whole file. What must hold for any bytes:
// - parse_header (src/safetensors.cpp) returns or throws shardex::error, and
//   nothing else escapes (no other exception, no crash, no sanitizer report);
// - a header it accepts fits the file: every tensor's bytes lie in the data
//   section, which they tile exactly, and reading them as a load does
//   (io::decode of the float dtypes) stays inside the input (ASan checks);
// - writing the accepted header again (make_header) and parsing that gives the
//   same tensors and metadata: the writer and the reader agree.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "shardex/core/error.hpp"
#include "shardex/io/safetensors_header.hpp"
#include "shardex/io/stored_dtype.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "safetensors_fuzzer: %s\n", what);
  std::abort();
}

bool same(const shardex::io::SafetensorsHeader& a, const shardex::io::SafetensorsHeader& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t k = 0; k < a.tensors.size(); ++k) {
    const auto &x = a.tensors[k], &y = b.tensors[k];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin || x.end != y.end)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  using namespace shardex;
  const std::string_view file(reinterpret_cast<const char*>(bytes), size);
  const auto file_size = static_cast<std::int64_t>(size);
  io::SafetensorsHeader h;
  try {
    h = io::parse_header(file, file_size, "fuzz.safetensors");
  } catch (const shardex::error&) {
    return 0;  // refused, with a message: what untrusted bytes should get
  }
  // Accepted: the tensors tile [data_begin, size) in order.
  std::int64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at || t.end < t.begin) broken("accepted tensors that do not tile the data section");
    at = t.end;
  }
  if (h.data_begin < 10 || h.data_begin + at != file_size) broken("accepted a data section of the wrong size");
  // Read every float tensor as load does, a chunk at a time.
  std::vector<double> out(4096);
  for (const auto& t : h.tensors) {
    if (!io::is_float_dtype(t.dtype)) continue;
    const int elem = io::dtype_bytes(t.dtype);
    const std::int64_t n = (t.end - t.begin) / elem;
    for (std::int64_t i = 0; i < n; i += 4096) {
      const std::int64_t m = std::min<std::int64_t>(4096, n - i);
      io::decode(t.dtype, bytes + h.data_begin + t.begin + i * elem, out.data(), m);
    }
  }
  // Written again and read back: the same header (make_header may not refuse what parse_header accepted).
  std::vector<io::TensorEntry> entries = h.tensors;
  const std::string again = io::make_header(entries, h.metadata) + std::string(file.substr(h.data_begin));
  const io::SafetensorsHeader h2 = io::parse_header(again, static_cast<std::int64_t>(again.size()), "again");
  if (!same(h, h2)) broken("the header written from an accepted one reads back differently");
  return 0;
}
