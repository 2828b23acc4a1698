// SPDX-License-Identifier: MIT
// GPT-2's sizes (Hugging Face's GPT2Config: n_layer, n_head, n_embd,
// n_positions, vocab_size, layer_norm_epsilon) and how a run splits them over
// its ranks: the heads (with their q, k, v and output-projection columns), the
// MLP's hidden columns and the vocabulary rows, each in any lengths (zero on a
// rank included), nothing padded.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <shardex.hpp>

namespace gpt2 {

struct Config {
  std::int64_t layers = 12, heads = 12, width = 768, context = 1024, vocab = 50257;
  double eps = 1e-5;

  [[nodiscard]] std::int64_t head_dim() const { return width / heads; }
  [[nodiscard]] std::int64_t ffn() const { return 4 * width; }

  /// @throws shardex::invalid_argument naming the size that does not fit.
  void check() const {
    const auto need = [](bool ok, const std::string& what) {
      if (!ok) throw shardex::invalid_argument("gpt2 config: " + what);
    };
    need(layers >= 1 && heads >= 1 && width >= 1 && context >= 1 && vocab >= 1,
         "every size must be positive: layers " + std::to_string(layers) + ", heads " + std::to_string(heads) +
             ", width " + std::to_string(width) + ", context " + std::to_string(context) + ", vocab " +
             std::to_string(vocab));
    // Bounds that keep every product of sizes below int64's range and a
    // config from a file from asking for an absurd model.
    need(layers <= 4096 && heads <= 65536 && width <= (1 << 20) && context <= (1 << 24) && vocab <= (1 << 30),
         "a size beyond what shardex builds (layers <= 4096, heads <= 65536, width <= 2^20, context <= 2^24, "
         "vocab <= 2^30): " +
             str());
    need(width % heads == 0, "the heads (" + std::to_string(heads) + ") must divide the width (" +
                                 std::to_string(width) + "): each head is width / heads wide");
    need(std::isfinite(eps) && eps > 0, "layer_norm_epsilon must be a positive number, not " + std::to_string(eps));
  }

  [[nodiscard]] std::string str() const {
    return "layers " + std::to_string(layers) + ", heads " + std::to_string(heads) + ", width " +
           std::to_string(width) + ", context " + std::to_string(context) + ", vocab " + std::to_string(vocab);
  }
};

/// Per rank: how many heads, MLP columns and vocabulary rows it holds.
struct Split {
  std::vector<std::int64_t> heads, ffn, vocab;

  /// Each size in proportion to the ranks' speeds (a zero speed: nothing).
  static Split proportional(const Config& c, const std::vector<double>& speeds) {
    return {shardex::proportional_lengths(c.heads, speeds), shardex::proportional_lengths(c.ffn(), speeds),
            shardex::proportional_lengths(c.vocab, speeds)};
  }
  /// One rank holding everything.
  static Split whole(const Config& c) { return {{c.heads}, {c.ffn()}, {c.vocab}}; }

  /// The attention's columns per rank: heads x head_dim.
  [[nodiscard]] std::vector<std::int64_t> head_columns(const Config& c) const {
    std::vector<std::int64_t> cols;
    for (std::int64_t h : heads) cols.push_back(h * c.head_dim());
    return cols;
  }

  /// The tokens of each rank under sequence parallelism: `n` in proportion
  /// to the MLP's columns (so to the speeds the split was made from).
  [[nodiscard]] std::vector<std::int64_t> tokens(std::int64_t n) const {
    return shardex::proportional_lengths(n, std::vector<double>(ffn.begin(), ffn.end()));
  }

  /// @throws shardex::invalid_argument unless each list has one length per rank summing to its size.
  void check(const Config& c, int ranks) const {
    const auto fits = [ranks](const std::vector<std::int64_t>& ls, std::int64_t total, const char* what) {
      const bool ok = static_cast<int>(ls.size()) == ranks &&
                      std::all_of(ls.begin(), ls.end(), [](std::int64_t l) { return l >= 0; }) &&
                      std::accumulate(ls.begin(), ls.end(), std::int64_t(0)) == total;
      if (!ok)
        throw shardex::invalid_argument(std::string("gpt2 split: the ") + what + " lengths " + shardex::to_string(ls) +
                                        " must be " + std::to_string(ranks) + " lengths >= 0 summing to " +
                                        std::to_string(total));
    };
    fits(heads, c.heads, "heads"), fits(ffn, c.ffn(), "MLP"), fits(vocab, c.vocab, "vocabulary");
  }
};

}  // namespace gpt2
