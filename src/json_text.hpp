// SPDX-License-Identifier: MIT
#pragma once
// The one JSON string escaper of the files shardex writes: the safetensors
// header (src/safetensors.cpp) and the trace (src/trace.cpp). nlohmann-json's
// own, so that what is written is what nlohmann-json (and any JSON reader)
// reads back. A private header of src/: nlohmann-json is no dependency of the
// public headers.
#include <string>

#include <nlohmann/json.hpp>

namespace shardex::detail {

/// `s` as a JSON string literal, quotes included: `"`, `\` and the control
/// characters escaped (\b \f \n \r \t, the others \u00XX), every other byte as
/// it is (UTF-8 passes through). Bytes that are not UTF-8: with `strict`,
/// throws nlohmann::json::type_error (a file that readers would refuse);
/// without, each becomes U+FFFD.
inline std::string json_quoted(const std::string& s, bool strict) {
  return nlohmann::json(s).dump(
      -1, ' ', false, strict ? nlohmann::json::error_handler_t::strict : nlohmann::json::error_handler_t::replace);
}

}  // namespace shardex::detail
