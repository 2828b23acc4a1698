// SPDX-License-Identifier: MIT
// The safetensors header (include/shardex/io/safetensors_header.hpp): written
// and read with nlohmann-json (a private dependency of src/), then validated
// here: the JSON is strict RFC 8259 (no `1.2.3`, no leading zeros, no lone
// surrogates, UTF-8 only), a key given twice in one object is refused (the
// library would keep the last one), and the header is at most 100,000,000
// bytes, the reference implementation's limit (safetensors' MAX_HEADER_SIZE).
#include "shardex/io/safetensors_header.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "json_text.hpp"
#include "shardex/core/error.hpp"

namespace shardex::io {

namespace {

using nlohmann::json;

// A real header nests 3 deep (the header, a tensor, its shape); more than this
// is refused while parsing, before the tree grows.
constexpr int max_depth = 32;

/// nlohmann-json's message with every byte over 0x7F as <XX>: its "last read"
/// quotes the file's bytes, which need not be UTF-8.
std::string printable(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80) {
      out += c;
    } else {
      out += '<';
      out += hex[b >> 4];
      out += hex[b & 0xF];
      out += '>';
    }
  }
  return out;
}

/// Builds the header's tree from nlohmann-json's SAX events, refusing a key
/// given twice in one object (nlohmann's own tree builder keeps the last one)
/// and nesting deeper than max_depth. Its callback parser could check keys
/// too, but it scans the parent object after every nested one ends: O(k^2)
/// for k tensors.
class Builder final : public nlohmann::json_sax<json> {
public:
  explicit Builder(const std::string& where) : where_(where) {}
  json root;
  std::string failure;  // nlohmann-json's message, when it stops at bad JSON
  std::size_t failure_at = 0;

  bool null() override { return put(nullptr) != nullptr; }
  bool boolean(bool v) override { return put(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return put(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return put(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return put(v) != nullptr; }
  bool string(string_t& v) override { return put(std::move(v)) != nullptr; }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    json& object = *open_.back();
    if (object.contains(k)) {
      if (open_.size() == 1) throw error(where_ + ": the tensor \"" + k + "\" appears twice");
      throw error(where_ + ": \"" + tensor_ + "\" has the key \"" + k + "\" twice");
    }
    if (open_.size() == 1) tensor_ = k;
    slot_ = &object[k];
    return true;
  }
  bool parse_error(std::size_t at, const std::string&, const nlohmann::json::exception& e) override {
    failure = e.what();
    failure_at = at;
    return false;
  }

private:
  json* put(json&& v) {
    if (open_.empty()) return &(root = std::move(v));
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool open(json&& v) {
    if (open_.size() >= max_depth)
      throw error(where_ + ": objects and arrays nest deeper than " + std::to_string(max_depth) + " levels");
    open_.push_back(put(std::move(v)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  const std::string& where_;
  std::vector<json*> open_;  // the objects and arrays being read, outermost first
  json* slot_ = nullptr;     // the value of the key just read
  std::string tensor_;       // the top-level key being read
};

/// The header's JSON text parsed; throws `error` naming `path` and what is wrong.
json parse_json(std::string_view text, const std::string& path) {
  const std::string where = "safetensors header of \"" + path + "\"";
  // Trailing JSON whitespace (a writer's padding) is left out of the first parse: a header
  // padded to the 100 MB limit takes a scan instead of the lexer's per-byte steps
  // (test/unit/test_safetensors_header.cpp: 15 s under ASan at -O0 before). A header that
  // fails is parsed again whole, so that its message (the byte, the text last read) is the
  // one the whole text gives.
  std::size_t end = text.size();
  while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == '\t'))
    --end;
  if (end > 0 && end < text.size()) {
    Builder trimmed(where);
    if (json::sax_parse(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), &trimmed))
      return std::move(trimmed.root);
  }
  Builder b(where);
  if (json::sax_parse(text.begin(), text.end(), &b)) return std::move(b.root);
  // nlohmann-json's message is "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error
  // ..." or, for a number beyond double's range, "[json.exception.out_of_range.406] number overflow ..." (the
  // fuzzer's first find, test/fuzz): keep what follows the position, and give the position as a byte of the file.
  std::string what = b.failure;
  const auto close = what.find("] ");
  if (close != std::string::npos) what = what.substr(close + 2);
  if (what.rfind("parse error", 0) == 0) {
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  throw error(where + " is not valid JSON at byte " + std::to_string(8 + std::max<std::size_t>(b.failure_at, 1) - 1) +
              ": " + printable(what));
}

/// A JSON integer in [0, 2^63) into `out`; false for anything else.
bool non_negative_integer(const json& v, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() == 0) {  // -0
    out = 0;
    return true;
  }
  return false;
}

/// A JSON value as a message shows it: at most 60 characters of its text.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

}  // namespace

const TensorEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string SafetensorsHeader::names() const {
  std::vector<std::string> ns;
  for (const auto& t : tensors) ns.push_back(t.name);
  std::sort(ns.begin(), ns.end());
  std::string out;
  for (const auto& n : ns) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

int dtype_bytes(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

std::string make_header(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata) {
  // One object dumped once (nlohmann-json's tree keeps its members in key
  // order: std::map, O(log k) per member; its ordered_json searches linearly).
  json doc = json::object();
  if (!metadata.empty()) doc["__metadata__"] = metadata;
  std::int64_t at = 0;
  for (auto& t : tensors) {
    if (t.name == "__metadata__" || doc.contains(t.name))
      throw invalid_argument("safetensors header: the tensor name \"" + t.name +
                             (t.name == "__metadata__" ? "\" is reserved" : "\" is given twice"));
    const int elem = dtype_bytes(t.dtype);
    if (elem == 0) throw invalid_argument("safetensors header: tensor \"" + t.name + "\" has an unknown dtype");
    std::int64_t n = elem;
    for (auto e : t.shape) n *= e;
    t.begin = at;
    t.end = at + n;
    at = t.end;
    json& entry = doc[t.name];
    entry["dtype"] = t.dtype;
    entry["shape"] = t.shape;
    entry["data_offsets"] = json::array({t.begin, t.end});
  }
  std::string text;
  try {
    text = doc.dump();
  } catch (const json::type_error&) {  // 316: a string that is not UTF-8; say which
    const auto check = [](const std::string& s, const std::string& what) {
      try {
        (void)detail::json_quoted(s, true);
      } catch (const json::type_error&) {
        throw invalid_argument("safetensors header: " + what + " " + detail::json_quoted(s, false) +
                               " is not valid UTF-8 (the header is UTF-8 JSON)");
      }
    };
    for (const auto& [k, v] : metadata) check(k, "the metadata key"), check(v, "the value of metadata key " + k);
    for (const auto& t : tensors) check(t.name, "the tensor name");
    throw;
  }
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int b = 0; b < 8; ++b) out[static_cast<std::size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + text;
}

std::int64_t header_length(std::string_view first8, std::int64_t file_size, const std::string& path) {
  if (first8.size() < 8 || file_size < 8)
    throw error("\"" + path + "\" is not a safetensors file: it has " + std::to_string(file_size) +
                " bytes, fewer than the 8 of the header length");
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(first8[static_cast<std::size_t>(b)]);
  if (n > max_header_bytes)
    throw error("\"" + path + "\" is not a safetensors file: its header length is " + std::to_string(n) +
                " bytes, more than the " + std::to_string(max_header_bytes) + " a safetensors header may have");
  if (n < 2 || n > static_cast<std::uint64_t>(file_size - 8))
    throw error("\"" + path + "\" is not a safetensors file (or is truncated): its header length is " +
                std::to_string(n) + " bytes but the file has " + std::to_string(file_size) + " bytes");
  return static_cast<std::int64_t>(n);
}

SafetensorsHeader parse_header(std::string_view head, std::int64_t file_size, const std::string& path) {
  const std::int64_t n = header_length(head.substr(0, std::min<std::size_t>(8, head.size())), file_size, path);
  if (static_cast<std::int64_t>(head.size()) < 8 + n) throw error("\"" + path + "\": the header is cut short");
  const json doc = parse_json(head.substr(8, static_cast<std::size_t>(n)), path);
  const auto bad = [&](const std::string& what) { return error("safetensors header of \"" + path + "\": " + what); };
  if (!doc.is_object()) throw bad("the header is not a JSON object");
  SafetensorsHeader h;
  h.data_begin = 8 + n;
  const std::int64_t data_size = file_size - h.data_begin;
  for (auto member = doc.begin(); member != doc.end(); ++member) {
    const std::string& name = member.key();  // not structured bindings: clang 14 cannot capture them
    const json& v = member.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, x] : v.items()) {
        if (!x.is_string()) throw bad("__metadata__ value of \"" + k + "\" is not a string");
        h.metadata[k] = x.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw bad("tensor \"" + name + "\" is not an object");
    const auto field = [&](const char* key) -> const json& {
      const auto it = v.find(key);
      if (it == v.end()) throw bad("tensor \"" + name + "\" has no \"" + key + "\"");
      return *it;
    };
    TensorEntry t;
    t.name = name;
    const json& dtype = field("dtype");
    if (!dtype.is_string() || dtype_bytes(dtype.get_ref<const std::string&>()) == 0)
      throw bad("tensor \"" + name + "\" has an unknown dtype " + shown(dtype));
    t.dtype = dtype.get<std::string>();
    const json& shape = field("shape");
    if (!shape.is_array()) throw bad("tensor \"" + name + "\": the shape is not a list");
    // The bytes of the shape, and the product of its non-zero extents (times the
    // element's bytes), which must fit in 64 bits too: a [0, 2^62, 2^62] holds no
    // bytes but would overflow whoever multiplies its extents in another order.
    std::int64_t bytes = dtype_bytes(t.dtype), nonzero = bytes;
    for (const auto& e : shape) {
      std::int64_t extent = 0;
      if (!non_negative_integer(e, extent)) throw bad("tensor \"" + name + "\": a shape entry is not an integer >= 0");
      t.shape.push_back(extent);
      if (extent == 0) {
        bytes = 0;
        continue;
      }
      if (nonzero > std::numeric_limits<std::int64_t>::max() / extent)
        throw bad("tensor \"" + name + "\": the shape is too large");
      nonzero *= extent;
      bytes *= extent;
    }
    const json& off = field("data_offsets");
    std::int64_t begin = 0, end = 0;
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer())
      throw bad("tensor \"" + name + "\": data_offsets is not a pair of integers");
    if (!non_negative_integer(off[0], begin) || !non_negative_integer(off[1], end) || end < begin)
      throw bad("tensor \"" + name + "\": data_offsets " + shown(off) + " are not a range");
    t.begin = begin;
    t.end = end;
    if (t.end - t.begin != bytes)
      throw bad("tensor \"" + name + "\": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                "] hold " + std::to_string(t.end - t.begin) + " bytes but a " + t.dtype + " tensor of its shape has " +
                std::to_string(bytes));
    if (t.end > data_size)
      throw bad("tensor \"" + name + "\" ends at data byte " + std::to_string(t.end) +
                " but the file's data section has " + std::to_string(data_size) +
                " bytes (a truncated file, or offsets that lie)");
    h.tensors.push_back(std::move(t));
  }
  // The data section is tiled exactly: no overlaps, no holes (as the format requires).
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::int64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at)
      throw bad("tensor \"" + t.name + "\" starts at data byte " + std::to_string(t.begin) + " where " +
                std::to_string(at) + " was expected (the data offsets overlap or leave a hole)");
    at = t.end;
  }
  if (at != data_size)
    throw bad("the tensors hold " + std::to_string(at) + " bytes but the data section has " +
              std::to_string(data_size) + " (bytes after the last tensor)");
  return h;
}

}  // namespace shardex::io
