// SPDX-License-Identifier: MIT
// Training GPT-2: AdamW over every parameter of a Model (its moments laid out
// and sharded like the parameters), gradient clipping by the norm of the
// logical gradients, the validation loss, greedy or sampled generation, and
// checkpoints in Hugging Face's format with the training state beside the
// weights (the moments as extra tensors, the step and the data position as
// metadata), which any world size and split resumes.
//
// shardex::Adam and shardex::clip_grad_norm take a fixed list of parameters
// (their types in the call); a model whose blocks are a vector walks them
// with for_each_parameter instead, with the same per-parameter pieces
// (Dev::adam_update, grad_norm_part).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include <shardex.hpp>
#include <shardex/autodiff/adam.hpp>
#include <shardex/io/safetensors.hpp>

#include "data.hpp"
#include "data_parallel.hpp"
#include "hf.hpp"
#include "model.hpp"

namespace gpt2 {

/// AdamW (torch.optim.AdamW's update) over every parameter of a Model: the
/// weight decay on the matrices and embeddings, not on biases and norms (as
/// nanoGPT and Megatron decay them).
template <class T, class Dev>
class AdamW {
public:
  AdamW(Model<T, Dev>& model, shardex::AdamOptions o) : o_(o) {
    model.for_each_parameter([&](const std::string& name, auto& p) {
      using P = std::remove_cvref_t<decltype(p)>;
      names_.push_back(name);
      m_.emplace_back(P::zeroed(p.comm(), p.shape(), p.mapping()));
      v_.emplace_back(P::zeroed(p.comm(), p.shape(), p.mapping()));
      decays_.push_back(p.shape().rank() == 2);
    });
  }

  /// One update of every parameter that has a gradient, each gradient taken
  /// times `grad_scale` (a clipping's factor, grad_clipping), then zero_grad,
  /// the gradient's storage left zero by the same pass and kept where nobody
  /// else holds it (shardex::adam_pass).
  /// No communication.
  void step(Model<T, Dev>& model, double grad_scale = 1) {
    ++t_;
    std::size_t i = 0;
    model.for_each_parameter([&](const std::string&, auto& p) {
      using P = std::remove_cvref_t<decltype(p)>;
      auto& m = std::get<P>(m_[i]);
      auto& v = std::get<P>(v_[i]);
      if (p.has_grad()) {
        shardex::adam_pass(p, m, v,
                           {.lr = o_.lr,
                            .beta1 = o_.beta1,
                            .beta2 = o_.beta2,
                            .eps = o_.eps,
                            .c1 = 1 - std::pow(o_.beta1, double(t_)),
                            .c2 = 1 - std::pow(o_.beta2, double(t_)),
                            .shrink = decays_[i] ? 1 - o_.lr * o_.weight_decay : 1.0,
                            .grad_scale = grad_scale});
      }
      ++i;
    });
  }

  void set_lr(double lr) { o_.lr = lr; }
  [[nodiscard]] std::int64_t steps() const noexcept { return t_; }

  /// The moments as extra tensors of a checkpoint: "shardex.adam.m.<name>", "shardex.adam.v.<name>".
  void add_to(shardex::TensorList& list) const {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      std::visit([&](const auto& m) { list.add("shardex.adam.m." + names_[i], host_copy(m)); }, m_[i]);
      std::visit([&](const auto& v) { list.add("shardex.adam.v." + names_[i], host_copy(v)); }, v_[i]);
    }
    list.metadata("shardex.adam.steps", std::to_string(t_));
  }
  /// Reads what add_to wrote, into this run's layouts and lengths; `steps` continues the bias correction.
  void load_from(const std::string& path, std::int64_t steps) {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      std::visit([&](auto& m) { shardex::load_into(m, path, "shardex.adam.m." + names_[i]); }, m_[i]);
      std::visit([&](auto& v) { shardex::load_into(v, path, "shardex.adam.v." + names_[i]); }, v_[i]);
    }
    t_ = steps;
  }

private:
  using Moment = std::variant<Tensor<T, Invariant, Dev>, Tensor<T, Sharded<0>, Dev>, Tensor<T, Sharded<1>, Dev>>;
  shardex::AdamOptions o_;
  std::vector<std::string> names_;
  std::vector<Moment> m_, v_;
  std::vector<bool> decays_;
  std::int64_t t_ = 0;
};

/// The clipping of one step's gradients: their norm, and the factor that
/// clips them, max_norm / (norm + 1e-6) when that is below one, else 1
/// (PyTorch's clip_grad_norm_).
struct Clipping {
  double norm = 0, scale = 1;
};

/// The clipping of gradients of norm `norm` to `max_norm` (0: none).
/// @throws shardex::error when the norm is not finite.
inline Clipping clipping_of(double norm, double max_norm) {
  if (!std::isfinite(norm))
    throw shardex::error("gpt2: the gradients' norm is " + std::to_string(norm) +
                         " (training diverged: lower the learning rate)");
  const double factor = max_norm / (norm + 1e-6);
  return {norm, max_norm > 0 && factor < 1 ? factor : 1.0};
}

/// Collective: the norm of the model's logical gradients (each element once,
/// an Invariant one not once per rank) and the factor clipping them to
/// `max_norm` (0: no clipping). The gradients are left as they are: AdamW's
/// step takes the factor in its pass over them (one pass fewer over 62 M
/// gradients per rank in GPT-2 small, bench/RESULTS.md).
/// @throws shardex::error on every rank when the norm is not finite.
template <class T, class Dev>
Clipping grad_clipping(Model<T, Dev>& model, double max_norm) {
  double counted = 0;
  model.for_each_parameter([&](const std::string&, auto& p) {
    counted += shardex::grad_norm_part<std::remove_cvref_t<decltype(p)>>::counted_squares(p);
  });
  const auto& comm = shardex::detail::control_of(model.comm());
  if (comm.size() > 1) comm.all_reduce(&counted, 1);
  return clipping_of(std::sqrt(counted), max_norm);
}

/// The squares of every parameter of `model`, taken by each backward as it
/// completes the parameter's gradient (shardex::GradSquares), for the
/// clipping below: no pass of its own over the gradients.
template <class T, class Dev>
shardex::GradSquares grad_squares(Model<T, Dev>& model) {
  shardex::GradSquares squares;
  model.for_each_parameter([&](const std::string&, auto& p) { squares.watch(p); });
  return squares;
}

/// grad_clipping from the squares the backward took (grad_squares(model)).
template <class T, class Dev>
Clipping grad_clipping(const Model<T, Dev>& model, shardex::GradSquares& squares, double max_norm) {
  return clipping_of(squares.norm(shardex::detail::control_of(model.comm())), max_norm);
}

/// The mean loss over `count` batches, batch i being `batch_of(i)` (each dp
/// group taking its part); no gradient kept.
template <class T, class Dev, class BatchOf>
double mean_loss(const DataParallel<T, Dev>& parallel, const Model<T, Dev>& model, std::int64_t count,
                 BatchOf&& batch_of) {
  double sum = 0;
  for (std::int64_t i = 0; i < count; ++i) sum += parallel.forward(model, batch_of(i)).value();
  return sum / double(count);
}

/// The mean loss over the first `count` validation batches (all of them if fewer).
template <class T, class Dev>
double validation_loss(const DataParallel<T, Dev>& parallel, const Model<T, Dev>& model, const Dataset& data,
                       std::int64_t count) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min(count, data.val_batches()));
  return mean_loss(parallel, model, n, [&data](std::int64_t i) { return data.validation(i); });
}

/// How generate picks each next token: greedy (temperature 0), or sampled
/// from softmax(logits / temperature) over the top_k most likely (0: all).
struct Sampling {
  double temperature = 0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 1;
};

/// `count` tokens following `prompt`, each from the logits of the last
/// position (the sequence cropped to the context), the model sharded as in
/// training: the vocabulary's logits are gathered to pick one, and every rank
/// picks the same (the same logits, the same generator).
template <class T, class Dev>
std::vector<std::int64_t> generate(const Model<T, Dev>& model, std::vector<std::int64_t> tokens, std::int64_t count,
                                   const Sampling& how) {
  if (tokens.empty()) throw shardex::invalid_argument("gpt2 --generate: the prompt is empty");
  std::mt19937_64 rng(how.seed);
  const std::int64_t vocab = model.config().vocab, context = model.config().context;
  std::vector<std::int64_t> out;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t len = std::min<std::int64_t>(static_cast<std::int64_t>(tokens.size()), context);
    const std::vector<std::int64_t> window(tokens.end() - len, tokens.end());
    const auto all = host_copy(
        shardex::eager::all_gather<Invariant>(model.logits(ids_tensor<Dev>(model.comm(), window), 1, len).detach()));
    const T* last = all.data() + (len - 1) * vocab;
    std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
    for (std::int64_t i = 0; i < vocab; ++i) order[static_cast<std::size_t>(i)] = i;
    std::int64_t next = 0;
    if (how.temperature <= 0) {
      next = std::max_element(last, last + vocab) - last;
    } else {
      const std::int64_t keep = how.top_k > 0 ? std::min(how.top_k, vocab) : vocab;
      std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                        [last](std::int64_t a, std::int64_t b) { return last[a] > last[b]; });
      std::vector<double> weights(static_cast<std::size_t>(keep));
      for (std::int64_t i = 0; i < keep; ++i)
        weights[static_cast<std::size_t>(i)] =
            std::exp((double(last[order[static_cast<std::size_t>(i)]]) - double(last[order[0]])) / how.temperature);
      std::discrete_distribution<std::int64_t> pick(weights.begin(), weights.end());
      next = order[static_cast<std::size_t>(pick(rng))];
    }
    tokens.push_back(next), out.push_back(next);
  }
  return out;
}

/// Where a run is: what a checkpoint keeps beside the weights and moments.
struct TrainingState {
  std::int64_t step = 0;           // steps done
  std::int64_t data_position = 0;  // the next training batch's first token
  std::uint64_t seed = 1;          // the run's seed (the initial weights, the sampling)
};

/// The file of a checkpoint directory (what --load, --save and --resume name).
inline std::string weights_file(const std::string& dir) { return dir + "/model.safetensors"; }

/// Collective: writes `dir`/config.json and `dir`/model.safetensors in
/// Hugging Face's format (GPT2LMHeadModel.from_pretrained(dir) loads them),
/// with the optimizer's moments as extra tensors and the state as metadata
/// when `opt` is given. The weights file appears whole or not at all
/// (shardex::save writes and renames), so a run killed while saving leaves
/// the previous checkpoint.
template <class T, class Dev>
void save_checkpoint(const std::string& dir, Model<T, Dev>& model, const AdamW<T, Dev>* opt,
                     const TrainingState& state) {
  const auto& comm = shardex::detail::control_of(model.comm());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // every rank: the directory may not be shared
  std::int64_t failed = 0;
  if (comm.rank() == 0) {
    const std::string tmp = dir + "/config.json.tmp";
    std::ofstream(tmp) << config_json(model.config());
    std::filesystem::rename(tmp, dir + "/config.json", ec);
    failed = ec ? 1 : 0;
  }
  comm.broadcast(&failed, 1, 0);
  if (failed) throw shardex::error("gpt2 --save: cannot write \"" + dir + "/config.json\"");
  shardex::TensorList list = hf_tensors(model, false);
  if (opt) {
    opt->add_to(list);
    list.metadata("shardex.step", std::to_string(state.step))
        .metadata("shardex.data_position", std::to_string(state.data_position))
        .metadata("shardex.seed", std::to_string(state.seed));
  }
  shardex::save(weights_file(dir), std::move(list));
}

/// Collective: reads a checkpoint save_checkpoint wrote into `model` (its
/// config must be the file's) and `opt`; returns the state to continue from.
/// @throws shardex::invalid_argument on every rank for a checkpoint without training state.
template <class T, class Dev>
TrainingState resume_checkpoint(const std::string& dir, Model<T, Dev>& model, AdamW<T, Dev>& opt) {
  const std::string path = weights_file(dir);
  const auto meta = shardex::read_metadata(shardex::detail::control_of(model.comm()), path);
  for (const char* key : {"shardex.step", "shardex.data_position", "shardex.seed", "shardex.adam.steps"})
    if (!meta.contains(key))
      throw shardex::invalid_argument("gpt2 --resume: \"" + path + "\" has no \"" + key +
                                      "\" in its metadata: it holds weights but no training state (--load reads "
                                      "those)");
  const auto number = [&](const char* key) {
    const std::string& s = meta.at(key);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {}
    if (used != s.size() || v < 0)
      throw shardex::invalid_argument("gpt2 --resume: \"" + path + "\": \"" + key + "\" is \"" + s + "\", not a count");
    return static_cast<std::int64_t>(v);
  };
  load_hf(model, path);
  opt.load_from(path, number("shardex.adam.steps"));
  return {number("shardex.step"), number("shardex.data_position"), static_cast<std::uint64_t>(number("shardex.seed"))};
}

}  // namespace gpt2
