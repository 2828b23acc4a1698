// SPDX-License-Identifier: MIT
// GPT-2's training data: a token stream read from a file (or a directory of
// them) and cut into batches the way llm.c's and nanoGPT's loaders cut them:
// batch i of B sequences of T tokens is the window of B*T + 1 tokens from
// position p, its inputs the first B*T and its targets the last B*T (the B
// sequences consecutive). The files are untrusted input: rank 0 reads them and
// every rank gets the same tokens (or the same error), and an id beyond the
// model's vocabulary is an error naming where it is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <shardex.hpp>

#include "model.hpp"
#include "tokenizer.hpp"

namespace gpt2 {

/// Byte tokens: a text's UTF-8 bytes are ids 0..255, and 256 ends a document
/// (GPT-2's <|endoftext|> plays the same part at 50256): vocabulary 257.
inline constexpr std::int64_t byte_vocab = 257;
inline constexpr std::int64_t end_of_text = 256;

/// A token stream and what it was read from.
struct Tokens {
  std::vector<std::int64_t> ids;
  std::string source;  // for messages: the path, and how it was read

  [[nodiscard]] std::int64_t size() const noexcept { return static_cast<std::int64_t>(ids.size()); }
};

namespace detail {

/// The bytes of a regular file, or why not.
inline std::string read_bytes(const std::filesystem::path& path, std::string& err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = "cannot open \"" + path.string() + "\"";
    return {};
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) err = "reading \"" + path.string() + "\" failed";
  return bytes;
}

/// A text's tokens: its bytes, or the tokenizer's ids (throwing on bad input).
inline void append_text(std::vector<std::int64_t>& ids, const std::string& text, const Tokenizer* tokenizer) {
  if (!tokenizer) {
    for (unsigned char c : text) ids.push_back(c);
    return;
  }
  const auto encoded = tokenizer->encode(text);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
}

/// What rank 0 read: the ids, or the error every rank throws.
inline Tokens read_on_rank0(const std::string& path, const Tokenizer* tokenizer, std::string& err) {
  const std::string as = tokenizer ? "GPT-2 BPE tokens" : "UTF-8 bytes";
  const std::int64_t eot = tokenizer ? tokenizer->end_of_text() : end_of_text;
  namespace fs = std::filesystem;
  Tokens t{{}, path};
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    // A directory: its regular files (not the links, which would repeat one) in name order, each a document.
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) err = "the directory \"" + path + "\" holds no regular file";
    for (const auto& f : files) {
      const std::string bytes = read_bytes(f, err);
      if (!err.empty()) break;
      append_text(t.ids, bytes, tokenizer);
      t.ids.push_back(eot);
    }
    t.source = path + " (" + std::to_string(files.size()) + " files as " + as + ")";
    return t;
  }
  const std::string bytes = read_bytes(path, err);
  if (!err.empty()) return t;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0) {
    // nanoGPT's prepare.py: the ids as little-endian uint16, nothing else.
    if (bytes.size() % 2 != 0) {
      err = "\"" + path + "\" has " + std::to_string(bytes.size()) +
            " bytes, an odd number: not little-endian uint16 token ids (truncated?)";
      return t;
    }
    t.ids.resize(bytes.size() / 2);
    for (std::size_t i = 0; i < t.ids.size(); ++i)
      t.ids[i] = static_cast<unsigned char>(bytes[2 * i]) | (static_cast<unsigned char>(bytes[2 * i + 1]) << 8);
    t.source = path + " (uint16 token ids)";
  } else {
    append_text(t.ids, bytes, tokenizer);
    t.source = path + " (" + as + ")";
  }
  return t;
}

}  // namespace detail

/// The tokens of `path`: a `.bin` of little-endian uint16 ids, a text file
/// (its bytes, or with a tokenizer its GPT-2 BPE tokens), or a directory (its
/// regular files' tokens in name order, each followed by the end-of-text
/// token). Collective: rank 0 reads, every rank gets the same tokens.
/// @throws shardex::invalid_argument on every rank for a file that cannot be
/// read, a .bin of an odd size, an id >= vocab (naming its position) or fewer
/// than `at_least` tokens.
inline Tokens read_tokens(const shardex::mpi::Communicator& comm, const std::string& path, std::int64_t vocab,
                          std::int64_t at_least, const Tokenizer* tokenizer = nullptr) {
  std::string err;
  Tokens t;
  if (comm.rank() == 0) {
    try {
      t = detail::read_on_rank0(path, tokenizer, err);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (err.empty()) {
      const auto bad = std::find_if(t.ids.begin(), t.ids.end(), [vocab](std::int64_t id) { return id >= vocab; });
      if (bad != t.ids.end())
        err = "token " + std::to_string(bad - t.ids.begin()) + " of " + t.source + " is " + std::to_string(*bad) +
              ", beyond the model's vocabulary of " + std::to_string(vocab) +
              (vocab == byte_vocab ? " (byte tokens: give a model with a larger vocabulary for token ids)" : "");
      else if (t.size() < at_least)
        err = t.source + " holds " + std::to_string(t.size()) + " tokens, fewer than the " + std::to_string(at_least) +
              " needed";
    }
  }
  std::int64_t sizes[2] = {static_cast<std::int64_t>(err.size()), t.size()};
  comm.broadcast(sizes, 2, 0);
  if (sizes[0] > 0) {
    err.resize(static_cast<std::size_t>(sizes[0]));
    comm.broadcast(err.data(), sizes[0], 0);
    throw shardex::invalid_argument("gpt2 --data: " + err);
  }
  std::int64_t source_size = static_cast<std::int64_t>(t.source.size());
  comm.broadcast(&source_size, 1, 0);
  t.source.resize(static_cast<std::size_t>(source_size));
  comm.broadcast(t.source.data(), source_size, 0);
  t.ids.resize(static_cast<std::size_t>(sizes[1]));
  if (sizes[1] > 0) comm.broadcast(t.ids.data(), sizes[1], 0);
  return t;
}

/// B sequences of T tokens and their next tokens.
struct Batch {
  std::vector<std::int64_t> inputs, targets;  // B*T each, the sequences one after another
};

/// The batch of B*T tokens starting at `pos` of `tokens` (needs B*T + 1 tokens from there).
inline Batch batch_at(const std::vector<std::int64_t>& tokens, std::int64_t pos, std::int64_t batch, std::int64_t seq) {
  const std::int64_t n = batch * seq;
  if (pos < 0 || pos + n + 1 > static_cast<std::int64_t>(tokens.size()))
    throw shardex::invalid_argument("gpt2: a batch of " + std::to_string(batch) + " x " + std::to_string(seq) +
                                    " tokens from position " + std::to_string(pos) + " does not fit in " +
                                    std::to_string(tokens.size()) + " tokens");
  const auto at = tokens.begin() + pos;
  return {{at, at + n}, {at + 1, at + n + 1}};
}

/// The training tokens and a held-out tail for validation, and where the next
/// training batch starts (a checkpoint saves it).
class Dataset {
public:
  /// `tokens` split into training and validation: the last `val_fraction`
  /// (at least one batch's window) held out.
  /// @throws shardex::invalid_argument when the tokens do not hold a training and a validation batch.
  Dataset(Tokens tokens, double val_fraction, std::int64_t batch, std::int64_t seq)
      : source_(std::move(tokens.source)), batch_(batch), seq_(seq) {
    const std::int64_t window = batch * seq + 1, n = tokens.size();
    const std::int64_t val = std::max(window, static_cast<std::int64_t>(double(n) * val_fraction));
    if (n - val < window)
      throw shardex::invalid_argument("gpt2 --data: " + source_ + " holds " + std::to_string(n) +
                                      " tokens, too few for a training and a validation batch of " +
                                      std::to_string(batch) + " x " + std::to_string(seq) + " (2 x " +
                                      std::to_string(window) + " tokens); lower --batch or --seq");
    train_.assign(tokens.ids.begin(), tokens.ids.end() - val);
    val_.assign(tokens.ids.end() - val, tokens.ids.end());
  }

  /// The next training batch; the position moves on by B*T, back to the start
  /// when the next window would run past the training tokens.
  Batch next() {
    if (pos_ + batch_ * seq_ + 1 > train_size()) pos_ = 0;
    Batch b = batch_at(train_, pos_, batch_, seq_);
    pos_ += batch_ * seq_;
    return b;
  }
  /// Validation batch i (of val_batches()).
  [[nodiscard]] Batch validation(std::int64_t i) const { return batch_at(val_, i * batch_ * seq_, batch_, seq_); }
  [[nodiscard]] std::int64_t val_batches() const { return (val_size() - 1) / (batch_ * seq_); }

  [[nodiscard]] std::int64_t position() const noexcept { return pos_; }
  /// Continues from a saved position. @throws shardex::invalid_argument outside the training tokens.
  void set_position(std::int64_t p) {
    if (p < 0 || p > train_size())
      throw shardex::invalid_argument("gpt2: the data position " + std::to_string(p) + " is outside the " +
                                      std::to_string(train_size()) + " training tokens of " + source_);
    pos_ = p;
  }
  [[nodiscard]] std::int64_t train_size() const noexcept { return static_cast<std::int64_t>(train_.size()); }
  [[nodiscard]] std::int64_t val_size() const noexcept { return static_cast<std::int64_t>(val_.size()); }
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

private:
  std::string source_;
  std::int64_t batch_, seq_, pos_ = 0;
  std::vector<std::int64_t> train_, val_;
};

/// Token ids as the model's input tensor (one value on every rank), on Dev.
template <class Dev>
Tensor<std::int64_t, Invariant, Dev> ids_tensor(const typename Dev::communicator& comm,
                                                const std::vector<std::int64_t>& ids) {
  return on_device<Dev>(Tensor<std::int64_t, Invariant>::from_local(shardex::detail::control_of(comm),
                                                                    {static_cast<std::int64_t>(ids.size())},
                                                                    std::span<const std::int64_t>(ids)),
                        comm);
}

}  // namespace gpt2
