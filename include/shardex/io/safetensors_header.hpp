// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The safetensors format (https://github.com/huggingface/safetensors):
/// an 8-byte little-endian header length N, N bytes of JSON (each tensor's
/// "dtype", "shape" and "data_offsets" [begin, end) into the data section,
/// and an optional "__metadata__" object of strings), then the raw
/// little-endian data. `make_header` writes one, `parse_header` reads and
/// validates one (compiled once, src/safetensors.cpp).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace shardex::io {

/// One tensor of a file: name, dtype ("F32", "F64", ...), shape, and its
/// bytes [begin, end) in the data section.
struct TensorEntry {
  /// The tensor's name (the header's key).
  std::string name;
  /// Its dtype ("F32", "BF16", ...).
  std::string dtype;
  /// Its shape.
  std::vector<std::int64_t> shape;
  ///@{
  /// Its data_offsets: bytes [begin, end) of the data section.
  std::int64_t begin = 0, end = 0;
  ///@}
};

/// A parsed safetensors header (parse_header checks it against the file).
struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  ///< in the order of their data
  /// The `__metadata__` strings.
  std::map<std::string, std::string> metadata;
  std::int64_t data_begin = 0;  ///< 8 + the header's length: where the data section starts

  /// The tensor called `name`, or null.
  [[nodiscard]] const TensorEntry* find(std::string_view name) const;
  /// "A, B, c" (for a message that a name is missing).
  [[nodiscard]] std::string names() const;
};

/// The largest header a file may have: 100,000,000 bytes, the limit of the
/// reference implementation (safetensors' MAX_HEADER_SIZE).
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

/// Bytes per element of a safetensors dtype; 0 for one this file does not know.
int dtype_bytes(std::string_view dtype);

/// The 8-byte length and the JSON header of `tensors`, laid out in the data
/// section in the given order (their begin and end are filled in), padded
/// with spaces so that the data starts at a multiple of 8 bytes. Throws
/// `shardex::invalid_argument` for a name given twice or "__metadata__", an
/// unknown dtype, or a name, dtype or metadata string that is not UTF-8.
std::string make_header(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata);

/// The header length in the first 8 bytes of a file of `file_size` bytes;
/// throws `shardex::error` naming `path` if it cannot be one (it runs past
/// the end of the file, or is over `max_header_bytes`).
std::int64_t header_length(std::string_view first8, std::int64_t file_size, const std::string& path);

/// The header of a file of `file_size` bytes whose first bytes (8 + its
/// length) are `head` (no file I/O: the checks of untrusted bytes, all here).
/// Throws `shardex::error` naming `path` and what is wrong: JSON that does
/// not parse (strict RFC 8259, UTF-8), a key given twice in one object, a
/// tensor without dtype, shape or offsets, an unknown dtype, a shape whose
/// size overflows, offsets that do not match the shape and dtype, that
/// overlap, leave holes or run past the end of the file, metadata that is
/// not strings.
SafetensorsHeader parse_header(std::string_view head, std::int64_t file_size, const std::string& path);

}  // namespace shardex::io
