// SPDX-License-Identifier: MIT
// GPT-2 with tensor parallelism on uneven shards (examples/gpt2/model.hpp,
// issue #26) equals the same model on one rank: the logits, the loss and the
// gradient of every parameter within 1e-12 (relative, double), for even,
// uneven and random splits of the heads, the MLP's columns and the vocabulary
// rows, a rank holding zero heads and a rank holding zero vocabulary rows
// among them; the clipping's norm from the squares the backward takes
// (shardex::GradSquares) is the unsharded model's, and on a dp x tp mesh the
// norm of the gradients summed over dp; bad sizes are errors naming them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <shardex.hpp>

#include "../../examples/gpt2/data_parallel.hpp"
#include "../../examples/gpt2/hf.hpp"
#include "../../examples/gpt2/train.hpp"
#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_gpt2 {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
const mpi::Communicator& world() { return test::world(); }

/// A small GPT-2 whose sizes divide no rank count above 1: 5 heads of 4, MLP 80, vocabulary 23.
gpt2::Config small_config() { return {.layers = 2, .heads = 5, .width = 20, .context = 8, .vocab = 23}; }

/// The splits of a test at this world size: even, in proportion to speeds
/// 1, 2, 3, 4, a rank with no heads beside a rank with no vocabulary rows,
/// and random lengths (zeros likely).
std::vector<gpt2::Split> splits(const gpt2::Config& c) {
  const int n = world().size();
  std::vector<gpt2::Split> out;
  out.push_back(gpt2::Split::proportional(c, std::vector<double>(static_cast<std::size_t>(n), 1.0)));
  std::vector<double> speeds;
  for (int r = 0; r < n; ++r) speeds.push_back(r + 1);
  out.push_back(gpt2::Split::proportional(c, speeds));
  if (n > 1) {
    auto zero_heads = std::vector<double>(static_cast<std::size_t>(n), 1.0), zero_vocab = zero_heads;
    zero_heads[0] = 0, zero_vocab[static_cast<std::size_t>(n - 1)] = 0;
    out.push_back({proportional_lengths(c.heads, zero_heads), proportional_lengths(c.ffn(), zero_heads),
                   proportional_lengths(c.vocab, zero_vocab)});
  }
  auto rng = test::shared_rng(26);
  out.push_back({test::random_lengths(rng, n, c.heads), test::random_lengths(rng, n, c.ffn()),
                 test::random_lengths(rng, n, c.vocab)});
  return out;
}

std::string to_string(const gpt2::Split& s) {
  return "heads " + shardex::to_string(s.heads) + ", ffn " + shardex::to_string(s.ffn) + ", vocab " +
         shardex::to_string(s.vocab);
}

/// The whole value of a tensor (a sharded one gathered), as doubles.
template <class T, LayoutTag L>
std::vector<double> whole(const Tensor<T, L>& x) {
  if constexpr (is_sharded_v<L>) {
    return whole(eager::all_gather<Invariant>(x));
  } else {
    return {x.data(), x.data() + x.local_shape().numel()};
  }
}

/// max |a - b| / max(1e-300, max |b|): relative to the tensor's largest element.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1e-300;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return NAN;
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

Tensor<std::int64_t, Invariant> random_ids(const mpi::Communicator& comm, std::int64_t n, std::int64_t vocab,
                                           std::uint64_t seed) {
  auto rng = test::shared_rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = pick(rng);
  return Tensor<std::int64_t, Invariant>::from_local(comm, {n}, std::span<const std::int64_t>(ids));
}

/// Every parameter's gradient by name, whole.
template <class M>
std::map<std::string, std::vector<double>> gradients(M& model) {
  std::map<std::string, std::vector<double>> g;
  model.for_each_parameter([&g](const std::string& name, auto& p) { g[name] = whole(p.grad()); });
  return g;
}

}  // namespace

TEST_CASE("GPT-2 on uneven shards equals the unsharded model: logits, loss and every gradient (double, 1e-12)") {
  const gpt2::Config c = small_config();
  const std::int64_t batch = 2, seq = 6;
  const auto ids = random_ids(world(), batch * seq, c.vocab, 1);
  const auto targets = random_ids(world(), batch * seq, c.vocab, 2);
  // The same model on one rank, every rank alone.
  const auto self = world().split(world().rank(), 0);
  gpt2::Model<double> one(self, c, gpt2::Split::whole(c), 7);
  one.trainable();
  const auto ids1 = random_ids(self, batch * seq, c.vocab, 1), targets1 = random_ids(self, batch * seq, c.vocab, 2);
  Tensor<double, Sharded<1>> logits1 = one.logits(ids1, batch, seq);
  Tensor<double, Invariant> loss1 = cross_entropy(logits1, targets1);
  backward(loss1);
  const auto want_logits = whole(logits1);
  const auto want_grads = gradients(one);
  const double want_norm = gpt2::grad_clipping(one, 0).norm;
  CHECK(std::isfinite(loss1.data()[0]));
  CHECK(want_grads.size() == 4 + 16 * 2);

  for (const gpt2::Split& s : splits(c))
    for (const bool sp : {false, true}) {
      CAPTURE(to_string(s));
      CAPTURE(sp);
      gpt2::Model<double> model(world(), c, s, 7);
      model.trainable().sequence_parallel(sp);
      GradSquares squares = gpt2::grad_squares(model);
      Tensor<double, Sharded<1>> logits = model.logits(ids, batch, seq);
      CHECK(logits.local_shape()[1] == s.vocab[static_cast<std::size_t>(world().rank())]);
      Tensor<double, Invariant> loss = cross_entropy(logits, targets);
      backward(loss);
      CHECK(rel_diff(whole(logits), want_logits) <= 1e-12);
      CHECK(std::abs(loss.data()[0] - loss1.data()[0]) <= 1e-12 * std::abs(loss1.data()[0]));
      // The squares taken in the backward, each element of each logical gradient once.
      CHECK(std::abs(gpt2::grad_clipping(model, squares, 0).norm - want_norm) <= 1e-12 * want_norm);
      const auto grads = gradients(model);
      for (const auto& entry : grads) {  // (not a structured binding: CAPTURE's lambda takes the name)
        const std::string& name = entry.first;
        const std::vector<double>& g = entry.second;
        CAPTURE(name);
        if (name.ends_with("attn.k.bias")) {
          // Mathematically zero (a shift of every key by the same bias shifts a
          // query's scores alike, which the softmax ignores): both rounding
          // noise, far below the k weight's gradient.
          const std::string weight = name.substr(0, name.size() - 4) + "weight";
          CHECK(max_abs(g) <= 1e-12 * max_abs(grads.at(weight)));
          CHECK(max_abs(want_grads.at(name)) <= 1e-12 * max_abs(want_grads.at(weight)));
          continue;
        }
        CHECK(max_abs(g) > 0);
        CHECK(rel_diff(g, want_grads.at(name)) <= 1e-12);
      }
    }
}

TEST_CASE("GPT-2 data-parallel on every dp x tp mesh: the squares taken in the backward are those summed over dp") {
  const gpt2::Config c = small_config();
  const int n = world().size();
  const std::int64_t seq = 6;
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(4 * seq + 1));
  auto rng = test::shared_rng(61);
  for (auto& t : tokens) t = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.vocab));
  for (int d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    const gpt2::MeshOf<Host> mesh(world(), {d, n / d});
    CAPTURE(mesh.str());
    const gpt2::DataParallel<double, Host> parallel(mesh, 4, seq);
    gpt2::Model<double> model(
        mesh.comm(1), c, gpt2::Split::proportional(c, std::vector<double>(static_cast<std::size_t>(n / d), 1.0)), 7);
    model.trainable();
    GradSquares squares = gpt2::grad_squares(model);
    parallel.forward(model, gpt2::batch_at(tokens, 0, 4, seq)).backward();
    const double direct = gpt2::grad_clipping(model, 0).norm;  // after the backward: the dp sums done
    CHECK(direct > 0);
    CHECK(std::abs(gpt2::grad_clipping(model, squares, 0).norm - direct) <= 1e-14 * direct);
  }
}

TEST_CASE("GPT-2 with sequence parallelism: each rank's residual rows in proportion to the MLP's split, zeros too") {
  const gpt2::Config c = small_config();
  const int n = world().size();
  std::vector<double> speeds(static_cast<std::size_t>(n), 1.0);
  speeds[0] = n > 1 ? 0.0 : 1.0;  // rank 0 holds no MLP column, so no token
  const gpt2::Split s = gpt2::Split::proportional(c, speeds);
  gpt2::Model<double> model(world(), c, s, 3);
  model.sequence_parallel(true);
  CHECK(model.sequence_parallel());
  const auto rows = model.token_lengths(12);
  CHECK(std::accumulate(rows.begin(), rows.end(), std::int64_t(0)) == 12);
  if (n > 1) CHECK(rows[0] == 0);
  // The logits equal those of the same model without it.
  const auto ids = random_ids(world(), 12, c.vocab, 5);
  const auto with = whole(model.logits(ids, 2, 6));
  model.sequence_parallel(false);
  CHECK(rel_diff(with, whole(model.logits(ids, 2, 6))) <= 1e-12);
}

TEST_CASE("GPT-2's sizes: heads that do not divide the width, a sequence beyond the context, ids of the wrong size") {
  gpt2::Config bad = small_config();
  bad.heads = 3;  // 20 is not a multiple of 3
  const auto even = std::vector<double>(static_cast<std::size_t>(world().size()), 1.0);
  CHECK_THROWS_WITH_AS(gpt2::Model<double>(world(), bad, gpt2::Split::proportional(bad, even), 1),
                       doctest::Contains("the heads (3) must divide the width (20)"), shardex::invalid_argument);
  const gpt2::Config c = small_config();
  gpt2::Split wrong = gpt2::Split::proportional(c, even);
  wrong.vocab[0] += 1;
  CHECK_THROWS_WITH_AS(gpt2::Model<double>(world(), c, wrong, 1), doctest::Contains("vocabulary lengths"),
                       shardex::invalid_argument);
  const gpt2::Model<double> model(world(), c, gpt2::Split::proportional(c, even), 1);
  CHECK_THROWS_WITH_AS(model.logits(random_ids(world(), 9, c.vocab, 3), 1, 9),
                       doctest::Contains("a sequence of 9 tokens does not fit the context of 8"),
                       shardex::invalid_argument);
  CHECK_THROWS_WITH_AS(model.logits(random_ids(world(), 7, c.vocab, 3), 2, 4), doctest::Contains("must be 2 x 4"),
                       shardex::invalid_argument);
  // An id beyond the vocabulary: the embedding's error, on every rank.
  const auto beyond = Tensor<std::int64_t, Invariant>::from_local(world(), {4}, std::vector<std::int64_t>{0, 70, 1, 2});
  CHECK_THROWS_WITH_AS(model.logits(beyond, 1, 4), doctest::Contains("70"), shardex::invalid_argument);
}

TEST_CASE("GPT-2's config.json: Hugging Face's sizes read, bad or foreign ones refused on every rank") {
  // Rank 0 writes each text (read_config reads on rank 0 and shares it).
  std::int64_t pid = ::getpid();
  world().broadcast(&pid, 1, 0);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("shardex_gpt2_config_" + std::to_string(pid) + ".json")).string();
  const auto read = [&](const std::string& text) {
    if (world().rank() == 0) std::ofstream(path) << text;
    world().barrier();
    return gpt2::read_config(world(), path);
  };
  const gpt2::Config c = read(R"({"n_layer": 3, "n_head": 4, "n_embd": 32, "n_positions": 16, "vocab_size": 50257,
                                  "layer_norm_epsilon": 1e-6, "activation_function": "gelu_new", "n_inner": null})");
  CHECK(c.layers == 3);
  CHECK(c.heads == 4);
  CHECK(c.width == 32);
  CHECK(c.context == 16);
  CHECK(c.vocab == 50257);
  CHECK(c.eps == 1e-6);
  CHECK(gpt2::read_config(world(), path).str() == c.str());  // config_json's text reads back the same
  if (world().rank() == 0) std::ofstream(path) << gpt2::config_json(c);
  world().barrier();
  CHECK(gpt2::read_config(world(), path).str() == c.str());
  const std::string sizes = R"("n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5)";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{", "is not JSON"},
      {"[1, 2]", "is not a JSON object"},
      {R"({"n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5})", "has no \"n_layer\""},
      {R"({"n_layer": 1.5, "n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5})",
       "\"n_layer\" in \"" + path + "\" must be a positive integer, not 1.5"},
      {R"({"n_layer": 1, "n_head": 3, "n_embd": 8, "n_positions": 4, "vocab_size": 5})",
       "the heads (3) must divide the width (8)"},
      {R"({"n_layer": 100000, "n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5})",
       "a size beyond what shardex builds"},
      {"{" + sizes + R"(, "activation_function": "relu"})", "sets activation_function to \"relu\""},
      {"{" + sizes + R"(, "tie_word_embeddings": false})", "sets tie_word_embeddings"},
      {"{" + sizes + R"(, "scale_attn_weights": false})", "sets scale_attn_weights"},
      {"{" + sizes + R"(, "scale_attn_by_inverse_layer_idx": true})", "sets scale_attn_by_inverse_layer_idx"},
      {"{" + sizes + R"(, "n_inner": 16})", "sets n_inner to 16"},
      {"{" + sizes + R"(, "layer_norm_epsilon": "small"})", "\"layer_norm_epsilon\" in"},
  };
  for (const auto& text_and_message : bad) {
    const std::string& text = text_and_message.first;
    const std::string& message = text_and_message.second;
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(read(text), doctest::Contains(message.c_str()), shardex::invalid_argument);
  }
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(path);
  world().barrier();
  CHECK_THROWS_WITH_AS(gpt2::read_config(world(), path), doctest::Contains("cannot read the config"),
                       shardex::invalid_argument);
}

}  // namespace shardex_test_gpt2
