// SPDX-License-Identifier: MIT
// The safetensors header reader on untrusted bytes (io/safetensors_header.hpp,
// src/safetensors.cpp), one case per row of the malformed-header table of
// docs/guides/untrusted-files.md: each file gets exactly the error shown there
// (and the page shows exactly these texts: checked here too). Also the inputs
// the fuzzer (test/fuzz) found, names that need escaping written and read back,
// and what make_header refuses.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <shardex/core/error.hpp>
#include <shardex/io/safetensors_header.hpp>

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_safetensors_header {

using namespace shardex;

namespace {

/// A file: the 8-byte length of `header` (or `length`), `header`, `data` zero bytes.
std::string file_of(const std::string& header, std::int64_t data, std::int64_t length = -1) {
  const std::uint64_t n = length < 0 ? header.size() : static_cast<std::uint64_t>(length);
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[static_cast<std::size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + header + std::string(static_cast<std::size_t>(data), '\0');
}

/// What parse_header says about `file` ("" if it accepts it).
std::string verdict(const std::string& file) {
  try {
    (void)io::parse_header(file, static_cast<std::int64_t>(file.size()), "m.safetensors");
    return "";
  } catch (const error& e) {
    return e.what();
  }
}

struct Case {
  const char* what;  // the table's first column
  std::string file;
  std::string error;  // exactly
};

const std::string T = R"("t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
const std::string H = "safetensors header of \"m.safetensors\"";

std::vector<Case> cases() {
  return {
      {"fewer than 8 bytes", std::string("\x10\0\0", 3),
       "\"m.safetensors\" is not a safetensors file: it has 3 bytes, fewer than the 8 of the header length"},
      {"a header length over 100,000,000", file_of("{}", 0, 100'000'001),
       "\"m.safetensors\" is not a safetensors file: its header length is 100000001 bytes, more than the 100000000 a "
       "safetensors header may have"},
      {"a header length past the end of the file", file_of("{}", 0, 4096),
       "\"m.safetensors\" is not a safetensors file (or is truncated): its header length is 4096 bytes but the file "
       "has 10 bytes"},
      {"not JSON", file_of("{@}", 0),
       H + " is not valid JSON at byte 9: syntax error while parsing object key - invalid literal; last read: '{@'; "
           "expected string literal"},
      {"`1.2.3`", file_of(R"({"t":{"dtype":"F32","shape":[1.2.3],"data_offsets":[0,4]}})", 4),
       H + " is not valid JSON at byte 40: syntax error while parsing array - invalid literal; last read: '1.2.'; expected ']'"},
      {"a leading zero", file_of(R"({"t":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", 4),
       H + " is not valid JSON at byte 38: syntax error while parsing array - unexpected number literal; expected ']'"},
      {"a lone surrogate", file_of(R"({"\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
       H + " is not valid JSON at byte 16: syntax error while parsing object key - invalid string: surrogate "
           "U+D800..U+DBFF must be followed by U+DC00..U+DFFF; last read: '\"\\ud800\"'; expected string literal"},
      {"a byte that is not UTF-8", file_of("{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
       H + " is not valid JSON at byte 10: syntax error while parsing object key - invalid string: ill-formed UTF-8 "
           "byte; last read: '\"<FF>'; expected string literal"},
      {"a number beyond double's range (found by the fuzzer)",
       file_of(R"({"t":{"dtype":"F32","shape":[291e37296],"data_offsets":[0,4]}})", 4),
       H + " is not valid JSON at byte 45: number overflow parsing '291e37296'"},
      {"a comment", file_of("{/* x */}", 0),
       H + " is not valid JSON at byte 9: syntax error while parsing object key - invalid literal; last read: '{/'; "
           "expected string literal"},
      {"text after the object", file_of("{} {}", 0),
       H + " is not valid JSON at byte 11: syntax error while parsing value - unexpected '{'; expected end of input"},
      {"a tensor given twice", file_of("{" + T + "," + T + "}", 4), H + ": the tensor \"t\" appears twice"},
      {"a key given twice in a tensor",
       file_of(R"({"t":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", 4),
       H + ": \"t\" has the key \"dtype\" twice"},
      {"a metadata key given twice", file_of(R"({"__metadata__":{"k":"a","k":"b"}})", 0),
       H + ": \"__metadata__\" has the key \"k\" twice"},
      {"nested 40 deep", file_of("{\"t\":" + std::string(40, '[') + std::string(40, ']') + "}", 0),
       H + ": objects and arrays nest deeper than 32 levels"},
      {"an array, not an object", file_of("[1,2]", 0), H + ": the header is not a JSON object"},
      {"a tensor that is not an object", file_of(R"({"t":"F32"})", 0), H + ": tensor \"t\" is not an object"},
      {"an unknown dtype", file_of(R"({"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\" has an unknown dtype \"F33\""},
      {"a dtype that is not a string", file_of(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\" has an unknown dtype 4"},
      {"no shape", file_of(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4), H + ": tensor \"t\" has no \"shape\""},
      {"a shape that is not a list", file_of(R"({"t":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\": the shape is not a list"},
      {"a negative extent", file_of(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\": a shape entry is not an integer >= 0"},
      {"an extent `1.0`", file_of(R"({"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\": a shape entry is not an integer >= 0"},
      {"a size over 2^63 bytes",
       file_of(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
       H + ": tensor \"t\": the shape is too large"},
      {"extents over 2^63 after a 0",
       file_of(R"({"t":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", 0),
       H + ": tensor \"t\": the shape is too large"},
      {"no data_offsets", file_of(R"({"t":{"dtype":"F32","shape":[1]}})", 4),
       H + ": tensor \"t\" has no \"data_offsets\""},
      {"one offset", file_of(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
       H + ": tensor \"t\": data_offsets is not a pair of integers"},
      {"offsets reversed", file_of(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
       H + ": tensor \"t\": data_offsets [4,0] are not a range"},
      {"an offset of 2^63", file_of(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,9223372036854775808]}})", 4),
       H + ": tensor \"t\": data_offsets [0,9223372036854775808] are not a range"},
      {"offsets that do not fit the shape", file_of(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
       H + ": tensor \"t\": data_offsets [0, 4] hold 4 bytes but a F32 tensor of its shape has 8"},
      {"a truncated data section", file_of(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       H + ": tensor \"t\" ends at data byte 8 but the file's data section has 4 bytes (a truncated file, or offsets "
           "that lie)"},
      {"tensors that overlap",
       file_of(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           8),
       H + ": tensor \"b\" starts at data byte 4 where 8 was expected (the data offsets overlap or leave a hole)"},
      {"a hole between tensors",
       file_of(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           12),
       H + ": tensor \"b\" starts at data byte 8 where 4 was expected (the data offsets overlap or leave a hole)"},
      {"bytes after the last tensor", file_of("{" + T + "}", 12),
       H + ": the tensors hold 4 bytes but the data section has 12 (bytes after the last tensor)"},
      {"metadata that is not an object", file_of(R"({"__metadata__":["a"]})", 0),
       H + ": __metadata__ is not an object"},
      {"a metadata value that is not a string", file_of(R"({"__metadata__":{"step":5}})", 0),
       H + ": __metadata__ value of \"step\" is not a string"},
  };
}

/// docs/guides/untrusted-files.md, found from this file's path as the build compiled it
/// (Meson runs the tests in the build folder; "" if it is not there).
std::string guide() {
  const auto page =
      std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "docs" / "guides" / "untrusted-files.md";
  std::ifstream in(page);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("every malformed header of the table gets its error") {
  for (const Case& c : cases()) {
    INFO(std::string(c.what));
    CHECK(verdict(c.file) == c.error);
  }
}

TEST_CASE("the guide's table shows exactly the errors the reader gives") {
  const std::string page = guide();
  if (page.empty()) {
    MESSAGE("docs/guides/untrusted-files.md not found from " __FILE__ " (run the test from the build folder)");
    return;
  }
  for (const Case& c : cases()) {
    INFO(std::string(c.what));
    // The page's cells hold the texts in code spans: the error after the file's name.
    std::string shown = c.error;
    CHECK_MESSAGE(page.find("| " + std::string(c.what) + " |") != std::string::npos, "a row named so");
    CHECK_MESSAGE(page.find("`" + shown + "`") != std::string::npos, shown);
  }
}

TEST_CASE("valid files: every dtype, 0-d and empty tensors, metadata, spaces before the data") {
  std::vector<io::TensorEntry> ts;
  for (const char* dtype : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
                            "F8_E4M3", "F8_E5M2"})
    ts.push_back({std::string("t_") + dtype, dtype, {2, 3}, 0, 0});
  ts.push_back({"scalar", "F64", {}, 0, 0});
  ts.push_back({"empty", "F32", {0, 7}, 0, 0});
  const std::map<std::string, std::string> meta{{"step", "5"}, {"format", "pt"}};
  const std::string head = io::make_header(ts, meta);
  CHECK(head.size() % 8 == 0);
  const std::string file = head + std::string(static_cast<std::size_t>(ts.back().end), '\0');
  const io::SafetensorsHeader h = io::parse_header(file, static_cast<std::int64_t>(file.size()), "v.safetensors");
  REQUIRE(h.tensors.size() == ts.size());
  CHECK(h.metadata == meta);
  CHECK(h.data_begin == static_cast<std::int64_t>(head.size()));
  for (std::size_t k = 0; k < ts.size(); ++k) {
    CHECK(h.tensors[k].name == ts[k].name);
    CHECK(h.tensors[k].dtype == ts[k].dtype);
    CHECK(h.tensors[k].shape == ts[k].shape);
    CHECK(h.tensors[k].begin == ts[k].begin);
    CHECK(h.tensors[k].end == ts[k].end);
  }
  // The header as nlohmann-json writes it: members in key order (a JSON object has no other), no spaces.
  const std::string expected =
      R"({"__metadata__":{"format":"pt","step":"5"},"empty":{"data_offsets":[302,302],"dtype":"F32","shape":[0,7]},)";
  CHECK(head.substr(8, expected.size()) == expected);
  // A header of exactly 100,000,000 bytes is read (spaces after the object).
  std::string big = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  big.resize(io::max_header_bytes, ' ');
  const std::string bigfile = file_of(big, 1);
  CHECK(io::parse_header(bigfile, static_cast<std::int64_t>(bigfile.size()), "big").tensors.size() == 1);
}

TEST_CASE("names that need escaping are written and read back as they were") {
  const std::string name = "q\"b\\n\nt\t\x01\x1f\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  std::vector<io::TensorEntry> ts{{name, "F32", {1}, 0, 0}};
  const std::map<std::string, std::string> meta{{name, name}};
  const std::string file = io::make_header(ts, meta) + std::string(4, '\0');
  // nlohmann-json's escapes: \" \\ \n \t \u0001 \u001f; DEL and UTF-8 as they are.
  CHECK(file.find(R"("q\"b\\n\nt\t\u0001\u001f)") != std::string::npos);
  const auto h = io::parse_header(file, static_cast<std::int64_t>(file.size()), "e");
  REQUIRE(h.tensors.size() == 1);
  CHECK(h.tensors[0].name == name);
  CHECK(h.metadata == meta);
}

TEST_CASE("make_header refuses what a reader would refuse") {
  const auto refused = [](std::vector<io::TensorEntry> ts, std::map<std::string, std::string> meta = {}) {
    try {
      (void)io::make_header(ts, meta);
      return std::string();
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
  };
  CHECK(refused({{"a\xff", "F32", {1}, 0, 0}}) ==
        "safetensors header: the tensor name \"a\xef\xbf\xbd\" is not valid UTF-8 (the header is UTF-8 JSON)");
  CHECK(
      refused({{"a", "F32", {1}, 0, 0}}, {{"k", "\xc3"}}) ==
      "safetensors header: the value of metadata key k \"\xef\xbf\xbd\" is not valid UTF-8 (the header is UTF-8 JSON)");
  CHECK(refused({{"a", "F32", {1}, 0, 0}, {"a", "F32", {1}, 0, 0}}) ==
        "safetensors header: the tensor name \"a\" is given twice");
  CHECK(refused({{"__metadata__", "F32", {1}, 0, 0}}) ==
        "safetensors header: the tensor name \"__metadata__\" is reserved");
  CHECK(refused({{"a", "F33", {1}, 0, 0}}) == "safetensors header: tensor \"a\" has an unknown dtype");
}

}  // namespace shardex_test_safetensors_header
