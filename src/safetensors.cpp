// The safetensors header: writing and parsing with validation
// (include/shardex/io/safetensors_header.hpp). A small JSON reader of its own:
// the header is JSON objects, arrays, strings and integers.
#include "shardex/io/safetensors_header.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardex/core/error.hpp"

namespace shardex::io {

namespace {

// ---- a minimal JSON value and reader -----------------------------------------------------
struct Json {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool flag = false;
  bool integral = false;
  std::int64_t integer = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in file order
};

class Reader {
public:
  Reader(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (i_ != s_.size()) fail("unexpected text after the header object");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw error("safetensors header of \"" + path_ + "\" is not valid JSON at byte " + std::to_string(8 + i_) + ": " +
                what);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    skip_space();
    if (i_ >= s_.size()) fail("the header ends too early");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  Json value(int depth) {
    if (depth > 32) fail("nested too deep");
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      Json v;
      v.kind = Json::Kind::string;
      v.text = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const char* word : {"true", "false", "null"})
      if (s_.substr(i_, std::char_traits<char>::length(word)) == word) {
        i_ += std::char_traits<char>::length(word);
        Json v;
        v.kind = word[0] == 'n' ? Json::Kind::null : Json::Kind::boolean;
        v.flag = word[0] == 't';
        return v;
      }
    fail(std::string("unexpected character '") + c + "'");
  }
  Json object(int depth) {
    Json v;
    v.kind = Json::Kind::object;
    expect('{');
    if (peek() == '}') {
      ++i_;
      return v;
    }
    while (true) {
      if (peek() != '"') fail("expected a key");
      std::string key = string();
      for (const auto& m : v.members)
        if (m.first == key) fail("the key \"" + key + "\" appears twice");
      expect(':');
      v.members.emplace_back(std::move(key), value(depth + 1));
      const char c = peek();
      ++i_;
      if (c == '}') return v;
      if (c != ',') fail("expected ',' or '}'");
    }
  }
  Json array(int depth) {
    Json v;
    v.kind = Json::Kind::array;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return v;
    }
    while (true) {
      v.items.push_back(value(depth + 1));
      const char c = peek();
      ++i_;
      if (c == ']') return v;
      if (c != ',') fail("expected ',' or ']'");
    }
  }
  Json number() {
    Json v;
    v.kind = Json::Kind::number;
    const std::size_t from = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    v.integral = true;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
      v.integral = false;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == 'e' ||
                                s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-'))
        ++i_;
    }
    const std::string_view digits = s_.substr(from, i_ - from);
    if (digits.empty() || digits == "-") fail("a number without digits");
    if (v.integral) {
      std::int64_t n = 0;
      const bool negative = digits[0] == '-';
      for (char d : digits.substr(negative ? 1 : 0)) {
        if (n > (std::numeric_limits<std::int64_t>::max() - (d - '0')) / 10) fail("an integer too large");
        n = n * 10 + (d - '0');
      }
      v.integer = negative ? -n : n;
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("a string that does not end");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("a string that does not end");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("a short \\u escape");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            cp = cp * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                 : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                                                 : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                                          : (fail("a bad \\u escape"), 0));
          }
          // UTF-8 (surrogate pairs are kept as two 3-byte sequences: names here are ASCII in practice)
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          fail(std::string("an unknown escape \\") + e);
      }
    }
  }

  std::string_view s_;
  std::string path_;
  std::size_t i_ = 0;
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    } else {
      out += c;
    }
  }
  return out + "\"";
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
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      json += (first ? "" : ",") + quoted(k) + ":" + quoted(v);
      first = false;
    }
    json += "}";
  }
  std::int64_t at = 0;
  for (auto& t : tensors) {
    std::int64_t n = dtype_bytes(t.dtype);
    for (auto e : t.shape) n *= e;
    t.begin = at;
    t.end = at + n;
    at = t.end;
    json +=
        std::string(json.size() > 1 ? "," : "") + quoted(t.name) + ":{\"dtype\":" + quoted(t.dtype) + ",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  json += "}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  for (int b = 0; b < 8; ++b) out[static_cast<std::size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + json;
}

std::int64_t header_length(std::string_view first8, std::int64_t file_size, const std::string& path) {
  if (first8.size() < 8)
    throw error("\"" + path + "\" is not a safetensors file: it has " + std::to_string(file_size) +
                " bytes, fewer than the 8 of the header length");
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(first8[static_cast<std::size_t>(b)]);
  if (n < 2 || n > static_cast<std::uint64_t>(file_size - 8) || n > (std::uint64_t(1) << 30))
    throw error("\"" + path + "\" is not a safetensors file (or is truncated): its header length is " +
                std::to_string(n) + " bytes but the file has " + std::to_string(file_size) + " bytes");
  return static_cast<std::int64_t>(n);
}

SafetensorsHeader parse_header(std::string_view head, std::int64_t file_size, const std::string& path) {
  const std::int64_t n = header_length(head.substr(0, std::min<std::size_t>(8, head.size())), file_size, path);
  if (static_cast<std::int64_t>(head.size()) < 8 + n) throw error("\"" + path + "\": the header is cut short");
  const Json doc = Reader(head.substr(8, static_cast<std::size_t>(n)), path).document();
  const auto bad = [&](const std::string& what) { return error("safetensors header of \"" + path + "\": " + what); };
  if (doc.kind != Json::Kind::object) throw bad("the header is not a JSON object");
  SafetensorsHeader h;
  h.data_begin = 8 + n;
  const std::int64_t data_size = file_size - h.data_begin;
  for (const auto& [name, v] : doc.members) {
    if (name == "__metadata__") {
      if (v.kind != Json::Kind::object) throw bad("__metadata__ is not an object");
      for (const auto& [k, x] : v.members) {
        if (x.kind != Json::Kind::string) throw bad("__metadata__ value of \"" + k + "\" is not a string");
        h.metadata[k] = x.text;
      }
      continue;
    }
    const auto field = [&](const char* key) -> const Json& {
      if (v.kind != Json::Kind::object) throw bad("tensor \"" + name + "\" is not an object");
      for (const auto& [k, x] : v.members)
        if (k == key) return x;
      throw bad("tensor \"" + name + "\" has no \"" + key + "\"");
    };
    TensorEntry t;
    t.name = name;
    const Json& dtype = field("dtype");
    if (dtype.kind != Json::Kind::string || dtype_bytes(dtype.text) == 0)
      throw bad("tensor \"" + name + "\" has an unknown dtype");
    t.dtype = dtype.text;
    const Json& shape = field("shape");
    if (shape.kind != Json::Kind::array) throw bad("tensor \"" + name + "\": the shape is not a list");
    std::int64_t bytes = dtype_bytes(t.dtype);
    for (const auto& e : shape.items) {
      if (e.kind != Json::Kind::number || !e.integral || e.integer < 0)
        throw bad("tensor \"" + name + "\": a shape entry is not an integer >= 0");
      t.shape.push_back(e.integer);
      if (e.integer != 0 && bytes > std::numeric_limits<std::int64_t>::max() / e.integer)
        throw bad("tensor \"" + name + "\": the shape is too large");
      bytes *= e.integer;
    }
    const Json& off = field("data_offsets");
    if (off.kind != Json::Kind::array || off.items.size() != 2 || off.items[0].kind != Json::Kind::number ||
        off.items[1].kind != Json::Kind::number || !off.items[0].integral || !off.items[1].integral)
      throw bad("tensor \"" + name + "\": data_offsets is not a pair of integers");
    t.begin = off.items[0].integer;
    t.end = off.items[1].integer;
    if (t.begin < 0 || t.end < t.begin)
      throw bad("tensor \"" + name + "\": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                "] are not a range");
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
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
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
