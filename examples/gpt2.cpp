// SPDX-License-Identifier: MIT
// GPT-2 trained, evaluated and run with tensor parallelism on uneven shards:
// the heads, the MLP's columns and the vocabulary rows split over the ranks in
// proportion to their speeds, nothing padded (examples/gpt2/model.hpp).
//
//   mpirun -n 4 build/examples/gpt2 --speeds 1,2,3,4 --check --generate "The "
//
// trains a small GPT-2 on byte tokens of a text (by default the licence texts
// every Debian system has in /usr/share/common-licenses), printing one line
// per step and the validation loss every --eval-every steps, then a sample
// of generated text, and (--check) the largest difference of the logits, the
// loss and every gradient from the same model run unsharded. It exits
// non-zero if that difference is beyond the tolerance or the loss did not
// fall. Hugging Face's GPT-2 files in and out:
//
//   mpirun -n 3 build/examples/gpt2 --load gpt2/ --eval --data val.bin
//   mpirun -n 3 build/examples/gpt2 --load gpt2/ --generate "Hello" --tokens 20 --steps 0
//   mpirun -n 4 build/examples/gpt2 --steps 500 --save run/ --save-every 100
//   mpirun -n 2 build/examples/gpt2 --steps 500 --resume run/        (another world size)
//
// --save DIR writes DIR/config.json and DIR/model.safetensors, which
// GPT2LMHeadModel.from_pretrained(DIR) loads; the optimizer's moments, the
// step and the data position ride in the same file (extra tensors, metadata).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <type_traits>

#include <shardex/autodiff/lr_schedule.hpp>

#include "gpt2/data.hpp"
#include "gpt2/data_parallel.hpp"
#include "gpt2/hf.hpp"
#include "gpt2/model.hpp"
#include "gpt2/train.hpp"
#include "support/cli.hpp"

using namespace shardex;

namespace {

struct Gpt2Flags : example::Flags {
  // The model (when neither --load nor --resume gives one).
  std::int64_t layers = 2, heads = 6, width = 96, context = 64, vocab = gpt2::byte_vocab;
  // The data and the run.
  std::string data = "/usr/share/common-licenses";
  std::int64_t batch = 8, seq = 64, warmup = 20, eval_every = 50, eval_batches = 8, save_every = 0, tune_gemm = 0;
  double min_lr_ratio = 0.1, weight_decay = 0.1, clip = 1.0, val_fraction = 0.1;
  double expect_val_below = 0;  // 0: no bound
  std::string load, save, resume, tokenizer, mesh;
  bool vocab_given = false, seed_given = false;
  bool eval_only = false, check = false, sequence_parallel = false;
  // Generation.
  std::string prompt;
  bool generate = false;
  std::int64_t tokens = 64, top_k = 0;
  double temperature = 0;
};

/// The checkpoint directory of --load PATH: the directory of a .safetensors file, else PATH itself.
std::string checkpoint_dir(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.extension() != ".safetensors" || std::filesystem::is_directory(p)) return path;
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

/// The model's sizes: from the checkpoint's config.json, or from the flags.
gpt2::Config config_of(const mpi::Communicator& comm, const Gpt2Flags& f, const gpt2::Tokenizer* tokenizer) {
  const std::string& from = !f.resume.empty() ? f.resume : f.load;
  if (!from.empty()) return gpt2::read_config(comm, checkpoint_dir(from) + "/config.json");
  // With a tokenizer and no --vocab, the vocabulary is the tokenizer's (50257 for GPT-2's).
  const std::int64_t vocab = tokenizer && !f.vocab_given ? tokenizer->vocab_size() : f.vocab;
  gpt2::Config c{.layers = f.layers, .heads = f.heads, .width = f.width, .context = f.context, .vocab = vocab};
  c.check();
  return c;
}

/// The weights file of --load PATH (a directory's model.safetensors, or PATH).
std::string load_file(const std::string& path) {
  return std::filesystem::path(path).extension() == ".safetensors" ? path : gpt2::weights_file(path);
}

/// A number as C++ streams write it by default (0.8, not 0.800000).
std::string format_number(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

/// Tokens as text: the tokenizer's decoding, byte tokens as their bytes,
/// end_of_text as GPT-2 writes it, other ids as "[id]".
std::string as_text(const std::vector<std::int64_t>& ids, std::int64_t vocab, const gpt2::Tokenizer* tokenizer) {
  if (tokenizer && vocab <= tokenizer->vocab_size()) return tokenizer->decode(ids);
  std::string s;
  for (std::int64_t id : ids) {
    if (vocab == gpt2::byte_vocab && id < 256)
      s += static_cast<char>(id);
    else if (vocab == gpt2::byte_vocab && id == gpt2::end_of_text)
      s += "<|endoftext|>";
    else
      s += "[" + std::to_string(id) + "]";
  }
  return s;
}

/// The prompt as tokens: the tokenizer's, its bytes (a model of byte tokens),
/// or ids "[464][3290]" / "464,3290" otherwise.
std::vector<std::int64_t> prompt_tokens(const std::string& prompt, std::int64_t vocab,
                                        const gpt2::Tokenizer* tokenizer) {
  if (tokenizer) {
    auto ids = tokenizer->encode(prompt);
    for (std::int64_t id : ids)
      if (id >= vocab)
        throw example::usage_error("--generate: the prompt's token " + std::to_string(id) +
                                   " is beyond the model's vocabulary of " + std::to_string(vocab));
    return ids;
  }
  std::vector<std::int64_t> ids;
  if (vocab == gpt2::byte_vocab) {
    for (unsigned char c : prompt) ids.push_back(c);
    return ids;
  }
  std::string digits;
  for (char c : prompt + ",") {
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (!digits.empty()) {
      ids.push_back(std::stoll(digits)), digits.clear();
      if (ids.back() >= vocab)
        throw example::usage_error("--generate: token id " + std::to_string(ids.back()) +
                                   " is beyond the vocabulary of " + std::to_string(vocab));
    }
  }
  if (ids.empty())
    throw example::usage_error(
        "--generate: with a vocabulary of " + std::to_string(vocab) +
        " (not byte tokens) the prompt is token ids, e.g. \"464,3290\", or give --tokenizer DIR");
  return ids;
}

/// The whole value of a tensor on the host (a sharded one gathered). Collective.
template <class T, LayoutTag L, class Dev>
Tensor<T, Invariant> gathered(const Tensor<T, L, Dev>& x) {
  const auto h = gpt2::host_copy(x);
  if constexpr (is_sharded_v<L>)
    return eager::all_gather<Invariant>(h);
  else
    return Tensor<T, Invariant>::from_local(detail::control_of(x.comm()), h.shape(),
                                            std::span<const T>(h.data(), h.size()));
}

/// The largest |element| of a tensor.
template <class T>
double largest(const Tensor<T, Invariant>& x) {
  double m = 0;
  for (std::int64_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x.data()[i])));
  return m;
}

/// max |a - b| / scale (by default the largest |element| of b); NaN for a non-finite element.
template <class T>
double rel_diff(const Tensor<T, Invariant>& a, const Tensor<T, Invariant>& b, double scale) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double x = a.data()[i], y = b.data()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return NAN;
    diff = std::max(diff, std::abs(x - y));
  }
  return diff / std::max(scale, 1e-300);
}

/// --check: the logits, the loss and every gradient of the first validation
/// batch, sharded against the same weights on one rank (the first rank of
/// each tensor-parallel group runs it, and compares its group's rows of the
/// logits); returns the largest relative difference (the same on every rank),
/// and in `derived_dp_sums` the all-reduces over dp its reverse pass ran.
template <class T, class Dev>
double unsharded_difference(const gpt2::DataParallel<T, Dev>& parallel, gpt2::Model<T, Dev>& model,
                            const gpt2::Dataset& data, std::int64_t batch, std::int64_t seq, std::string& worst_name,
                            std::int64_t& derived_dp_sums) {
  const mpi::Communicator& comm = parallel.mesh().world();
  const gpt2::Batch b = data.validation(0);
  typename gpt2::DataParallel<T, Dev>::Step step;
  // The transitions of the step, those of the reverse pass among them (mesh steps only).
  const Plan plan = explain_step([&] {
    step = parallel.forward(model, b);
    step.backward();
  });
  derived_dp_sums = std::count_if(plan.backward.begin(), plan.backward.end(),
                                  [](const PlanStep& s) { return s.op == "all_reduce<dp>"; });
  const Tensor<T, Invariant, Dev>& loss = step.loss_tensor();
  std::vector<std::pair<std::string, Tensor<T, Invariant>>> sharded = {{"logits", gathered(step.logits)},
                                                                       {"loss", gathered(loss)}};
  std::vector<Tensor<T, Invariant>> weights;
  model.for_each_parameter([&](const std::string& name, auto& p) {
    weights.push_back(gathered(p.detach()));
    sharded.emplace_back(name + " grad", gathered(p.grad()));
    p.zero_grad();
  });
  const mpi::Communicator alone = comm.split(comm.rank(), 0);
  double worst = 0;
  if (parallel.mesh().coord(1) == 0) {
    gpt2::Model<T> whole(alone, model.config(), gpt2::Split::whole(model.config()), 1);
    whole.trainable();
    std::size_t i = 0;
    whole.for_each_parameter([&](const std::string&, auto& p) {
      copy_elements<Host>(weights[i].data(), p.data(), p.size());
      ++i;
    });
    const auto wl = whole.logits(gpt2::ids_tensor<Host>(alone, b.inputs), batch, seq);
    const Tensor<T, Invariant> wloss = cross_entropy(wl, gpt2::ids_tensor<Host>(alone, b.targets));
    backward(wloss);
    // This group's sequences' rows of the logits.
    const std::int64_t vocab = model.config().vocab, row = parallel.first() * seq, rows = parallel.batch() * seq;
    const auto all = gathered(wl);
    std::vector<Tensor<T, Invariant>> ref = {
        Tensor<T, Invariant>::from_local(alone, {rows, vocab},
                                         std::span<const T>(all.data() + row * vocab, rows * vocab)),
        gathered(wloss)};
    whole.for_each_parameter([&](const std::string&, auto& p) { ref.push_back(gathered(p.grad())); });
    // A bias's gradient sums the terms its weight's gradient sums (with
    // inputs of one) and can be far smaller than they are: the keys' bias
    // gradient is zero in exact arithmetic (a shift of every key shifts a
    // query's scores alike, which the softmax ignores), the queries' is a
    // small difference of large terms once trained. Its rounding is measured
    // against the larger of its own scale and its weight gradient's.
    std::map<std::string, double> weight_scale;  // by layer: "h.0.attn.q"
    const auto layer_of = [](const std::string& name, const std::string& kind) {
      const auto at = name.rfind("." + kind + " grad");
      return at == std::string::npos ? std::string() : name.substr(0, at);
    };
    for (std::size_t k = 0; k < ref.size(); ++k) {
      const std::string& name = sharded[k].first;
      double scale = largest(ref[k]);
      if (const std::string layer = layer_of(name, "weight"); !layer.empty()) weight_scale[layer] = scale;
      if (const std::string layer = layer_of(name, "bias"); weight_scale.contains(layer))
        scale = std::max(scale, weight_scale[layer]);
      const double d = rel_diff(sharded[k].second, ref[k], scale);
      if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d, worst_name = sharded[k].first;
    }
  }
  // The worst over the groups, named by the first rank that found it.
  double worst_anywhere = worst;
  comm.all_reduce_max(&worst_anywhere, 1);
  std::int64_t finder = worst == worst_anywhere ? comm.rank() : comm.size();
  finder = -finder;
  comm.all_reduce_max(&finder, 1);
  std::int64_t len = static_cast<std::int64_t>(worst_name.size());
  comm.broadcast(&len, 1, static_cast<int>(-finder));
  worst_name.resize(static_cast<std::size_t>(len));
  comm.broadcast(worst_name.data(), len, static_cast<int>(-finder));
  return worst_anywhere;
}

/// The mesh of --mesh DPxTP (1 x the world without it). Collective: every
/// rank refuses a shape that does not fit the world.
template <class Dev>
gpt2::MeshOf<Dev> make_mesh(const mpi::Communicator& comm, const std::string& given) {
  const std::array<int, 2> shape =
      given.empty() ? std::array<int, 2>{1, comm.size()} : example::mesh_shape(given, comm.size());
  try {
    return gpt2::MeshOf<Dev>(comm, shape);
  } catch (const shardex::invalid_argument& e) {
    throw example::refused("--mesh " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + ": " + e.what());
  }
}

/// The speeds of the ranks of a tensor-parallel group: --speeds' (one per
/// rank of the group), else the world's (even, or measured) with each tp
/// coordinate as fast as its slowest rank over the dp groups (world rank
/// d * TP + t is at (d, t)), so that every group splits the model alike.
template <class Dev, class T>
std::vector<double> tp_speeds(const gpt2::MeshOf<Dev>& mesh, const Gpt2Flags& f, const GemmShape& gemm) {
  const auto w = example::speeds<Dev, T>(mesh.world(), f, gemm);
  const int groups = mesh.size(0), ranks = mesh.size(1);
  if (static_cast<int>(w.size()) != groups * ranks) return w;  // --speeds: one per rank of a group
  std::vector<double> out(w.begin(), w.begin() + ranks);
  for (int d = 1; d < groups; ++d)
    for (int t = 0; t < ranks; ++t)
      out[static_cast<std::size_t>(t)] =
          std::min(out[static_cast<std::size_t>(t)], w[static_cast<std::size_t>(d * ranks + t)]);
  return out;
}

/// --log: one CSV line per step (and the validation loss where it was measured).
struct Log {
  std::ofstream out;
  explicit Log(const std::string& path, bool writer) {
    if (path.empty() || !writer) return;
    out.open(path);
    if (!out) throw std::runtime_error("--log " + path + ": cannot open the file for writing");
    out << "step,loss,val_loss,lr,grad_norm,step_ms,tokens_per_s\n" << std::setprecision(8);
  }
  void line(std::int64_t step, double loss, double val, double lr, double norm, double ms, double tps) {
    if (out.is_open())
      out << step << ',' << loss << ',' << val << ',' << lr << ',' << norm << ',' << ms << ',' << tps << '\n';
  }
};

template <class T, class Dev>
int run(const mpi::Communicator& comm, const Gpt2Flags& f) {
  if (f.tune_gemm % 2 != 0)
    throw example::usage_error("--tune-gemm " + std::to_string(f.tune_gemm) + ": an even count (0: none)");
  const gpt2::MeshOf<Dev> mesh = make_mesh<Dev>(comm, f.mesh);
  const auto& dcomm = mesh.comm(1);  // the model's: its tensor-parallel group
  std::optional<gpt2::Tokenizer> tokenizer;
  if (!f.tokenizer.empty()) tokenizer.emplace(gpt2::Tokenizer::load(f.tokenizer));  // every rank: the same files
  const gpt2::Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  const gpt2::Config config = config_of(comm, f, tok);
  // Training, --eval and --check read sequences of --seq tokens; --generate
  // alone crops its window to the context.
  const bool needs_data = f.eval_only || f.steps > 0 || f.check;
  if (needs_data && f.seq > config.context)
    throw example::usage_error("--seq " + std::to_string(f.seq) + " is longer than the model's context of " +
                               std::to_string(config.context));
  const gpt2::DataParallel<T, Dev> parallel(mesh, f.batch, f.seq);
  const std::int64_t group_batch = parallel.batch();
  const auto speeds = tp_speeds<Dev, T>(mesh, f, GemmShape::plain(group_batch * f.seq, config.width, config.ffn()));
  const gpt2::Split split = gpt2::Split::proportional(config, speeds);
  const bool talk = comm.rank() == 0;
  if (talk) {
    std::cout << "gpt2: " << comm.size() << " ranks, " << config.str() << ", " << dtype_name<T>() << "\n";
    if (parallel.data_parallel())
      std::cout << "  a " << mesh.size(0) << " x " << mesh.size(1) << " mesh (dp, tp): the batch's sequences "
                << to_string(parallel.lengths()) << " over dp, each dp group of " << mesh.size(1)
                << (mesh.size(1) == 1 ? " rank" : " ranks") << " splitting the model\n";
    std::cout << "  heads " << to_string(split.heads) << ", MLP columns " << to_string(split.ffn)
              << ", vocabulary rows " << to_string(split.vocab)
              << (f.sequence_parallel ? ", tokens " + to_string(split.tokens(group_batch * f.seq)) : "") << "\n";
  }
  const auto seed = static_cast<std::uint64_t>(f.seed);
  gpt2::Model<T, Dev> model(dcomm, config, split, seed);
  model.trainable().sequence_parallel(f.sequence_parallel);
  if (!f.load.empty()) {
    gpt2::load_hf(model, load_file(f.load));
    if (talk) std::cout << "  loaded " << load_file(f.load) << "\n";
  }

  // --eval: the loaded weights' mean loss over batches from the first token, nothing else.
  std::optional<gpt2::Tokens> tokens;
  if (needs_data) tokens = gpt2::read_tokens(comm, f.data, config.vocab, f.batch * f.seq + 1, tok);
  if (f.eval_only) {
    const std::int64_t per = f.batch * f.seq, n = std::min(f.eval_batches, (tokens->size() - 1) / per);
    const double loss = gpt2::mean_loss(
        parallel, model, n, [&](std::int64_t i) { return gpt2::batch_at(tokens->ids, i * per, f.batch, f.seq); });
    if (talk)
      std::cout << "eval loss: " << std::setprecision(6) << loss << " (" << n << " batches of " << f.batch << " x "
                << f.seq << " tokens of " << tokens->source << ")\n";
    return 0;
  }

  std::optional<gpt2::Dataset> data;
  if (tokens) {
    data.emplace(std::move(*tokens), f.val_fraction, f.batch, f.seq);
    if (talk)
      std::cout << "  data: " << data->source() << ": " << data->train_size() << " tokens to train on, "
                << data->val_size() << " held out\n";
  }
  const double peak = example::learning_rate(f, 0, 1);
  gpt2::AdamW<T, Dev> opt(model, AdamOptions{.lr = peak, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = f.weight_decay});
  shardex::GradSquares squares = gpt2::grad_squares(model);  // the clipping's, taken by each backward
  gpt2::TrainingState state{0, 0, seed};
  if (!f.resume.empty()) {
    state = gpt2::resume_checkpoint(f.resume, model, opt);
    // The run goes on with its own seed (its sampling), as if never stopped.
    if (f.seed_given && static_cast<std::uint64_t>(f.seed) != state.seed)
      throw example::usage_error("--seed " + std::to_string(f.seed) + ": the run resumed from " + f.resume +
                                 " has the seed " + std::to_string(state.seed) + "; leave --seed out");
    if (data) data->set_position(state.data_position);
    if (talk) std::cout << "  resumed " << gpt2::weights_file(f.resume) << " at step " << state.step << "\n";
  }
  const WarmupCosine schedule{.peak = peak,
                              .floor = peak * f.min_lr_ratio,
                              .warmup = std::min(f.warmup, f.steps),
                              .total = std::max<std::int64_t>(f.steps, 1)};
  Log log(f.log, talk);
  // The first dp group writes the checkpoint (the others hold the same
  // weights); every rank learns whether it could, so that none waits for a
  // group that stopped.
  const auto save = [&](const gpt2::TrainingState& at) {
    std::string failure;
    if (mesh.coord(0) == 0) {
      try {
        gpt2::save_checkpoint(f.save, model, &opt, at);
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    std::int64_t failed = failure.empty() ? 0 : 1;
    comm.all_reduce_max(&failed, 1);
    if (failed)
      throw shardex::error(
          !failure.empty() ? failure : "gpt2 --save: the first data-parallel group could not write \"" + f.save + "\"");
  };
  std::vector<double> losses;
  double val = NAN;
  const auto validate = [&] {
    val = gpt2::validation_loss(parallel, model, *data, f.eval_batches);
    return val;
  };
  const auto train_step = [&](std::int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    const gpt2::Batch b = data->next();
    const auto pass = parallel.forward(model, b);
    pass.backward();
    const gpt2::Clipping clip = gpt2::grad_clipping(model, squares, f.clip);
    const double lr = schedule(step), norm = clip.norm;
    opt.set_lr(lr);
    opt.step(model, clip.scale);
    losses.push_back(pass.value());
    example::check_finite_loss(losses.back(), step, lr);
    const double ms = example::seconds_since(t0) * 1e3, tps = double(f.batch * f.seq) / (ms / 1e3);
    const bool eval_now = f.eval_every > 0 && ((step + 1) % f.eval_every == 0 || step + 1 == f.steps);
    val = eval_now ? validate() : NAN;
    if (talk) {
      std::cout << "step " << std::setw(4) << step + 1 << "/" << f.steps << "  loss " << std::fixed
                << std::setprecision(4) << losses.back() << "  lr " << std::scientific << std::setprecision(2) << lr
                << "  norm " << std::fixed << std::setprecision(3) << norm << "  " << std::setprecision(1) << ms
                << " ms  " << std::setprecision(0) << tps << " tokens/s";
      if (eval_now) std::cout << "  val loss " << std::setprecision(4) << val;
      std::cout << std::defaultfloat << "\n";
    }
    log.line(step + 1, losses.back(), val, lr, norm, ms, tps);
    state.step = step + 1, state.data_position = data->position();
    if (!f.save.empty() && f.save_every > 0 && state.step % f.save_every == 0 && state.step < f.steps) save(state);
  };
  std::int64_t step = state.step;
  const auto next_step = [&] { train_step(step++); };
  // --tune-gemm N: the host's GEMM kernels chosen again from N steps after the
  // first (device/host/gemm_tuning.hpp), every rank of the run agreeing.
  if (f.tune_gemm > 0) {
    if constexpr (std::is_same_v<Dev, Host>) {
      if (step + 1 + f.tune_gemm <= f.steps) {
        next_step();
        shardex::host::tune_gemm_kernels(comm, static_cast<int>(f.tune_gemm), next_step);
        if (talk) std::cout << shardex::host::gemm_kernels_report();
      } else if (talk) {
        std::cout << "--tune-gemm " << f.tune_gemm << ": not run (" << f.steps - step
                  << " steps left to run; it needs one more than it times)\n";
      }
    } else if (talk) {
      std::cout << "--tune-gemm: not run (the GPU's products are cuBLAS's; it tunes the host's)\n";
    }
  }
  while (step < f.steps) next_step();
  if (!f.save.empty()) {
    save(state);
    if (talk) std::cout << "saved " << f.save << " (config.json, model.safetensors) at step " << state.step << "\n";
  }

  if (f.generate) {
    const gpt2::Sampling how{f.temperature, f.top_k, state.seed};
    const auto prompt = prompt_tokens(f.prompt, config.vocab, tok);
    const auto out = gpt2::generate(model, prompt, f.tokens, how);
    if (talk)
      std::cout << "generated (" << (f.temperature > 0 ? "temperature " + format_number(f.temperature) : "greedy")
                << (f.top_k > 0 ? ", top-k " + std::to_string(f.top_k) : "") << "):\n"
                << as_text(prompt, config.vocab, tok) << as_text(out, config.vocab, tok) << "\n";
  }

  int code = 0;
  if (f.check) {
    std::string where;
    std::int64_t dp_sums = 0;
    const double d = unsharded_difference(parallel, model, *data, f.batch, f.seq, where, dp_sums);
    // In float, a trained model's query gradients are a small difference of
    // large terms (the softmax's backward): sharded and unsharded float runs
    // of the same weights differ there by up to 1.6e-4 (docs/guides/gpt2.md).
    const double tol = std::same_as<T, double> ? 1e-12 : 1e-3;
    if (talk)
      std::cout << "max relative difference from the unsharded model: " << std::scientific << std::setprecision(2) << d
                << " (" << where << "; tolerance " << tol << ")\n"
                << std::defaultfloat;
    if (!(d <= tol)) code = command_line::as_int(example::exit_code::differs);
    if (parallel.data_parallel()) {
      // One derived gradient all-reduce over dp per weight (replicate<dp>'s adjoint).
      std::int64_t weights = 0;
      model.for_each_parameter([&](const std::string&, const auto&) { ++weights; });
      // Invariant on dp: every group updated its copy of the weights alike, to the bit.
      const std::int64_t differ = parallel.weights_differing(model);
      if (talk)
        std::cout << "the reverse pass ran " << dp_sums << " all_reduce<dp> for " << weights
                  << " weights (derived from replicate<dp>); weights of the " << mesh.size(0)
                  << " data-parallel groups: "
                  << (differ == 0 ? std::string("identical")
                                  : std::to_string(differ) + " tensors differ from the first group's")
                  << "\n";
      if (differ != 0 || dp_sums != weights) code = command_line::as_int(example::exit_code::differs);
    }
  }
  if (!losses.empty()) {
    // Did it learn: the mean loss of the first tenth of the steps against the last tenth.
    const std::size_t k = std::max<std::size_t>(1, losses.size() / 10);
    const auto [first, last] = example::first_and_last_pass(losses, static_cast<std::int64_t>(k));
    const bool judged = losses.size() >= 20 && state.step == f.steps && f.resume.empty();
    if (talk) {
      std::cout << "mean loss of the first " << k << " steps " << std::setprecision(4) << first << " -> last " << k
                << " steps " << last;
      if (!std::isnan(val)) std::cout << "; validation loss " << val;
      std::cout << (!judged        ? " (not judged: fewer than 20 steps, or a resumed run)"
                    : last < first ? " (went down)"
                                   : " (DID NOT GO DOWN)")
                << std::defaultfloat << "\n";
    }
    if (judged && !(last < first) && code == 0) code = command_line::as_int(example::exit_code::did_not_learn);
  }
  if (f.expect_val_below > 0) {
    // The main example's stated figure (README.md, docs/guides/gpt2.md): the last validation loss
    // under it, measured at the last step.
    const bool below = val < f.expect_val_below;  // false where none was measured (NaN)
    if (talk) {
      std::cout << "validation loss ";
      if (std::isnan(val))
        std::cout << "not measured at the last step (--eval-every)";
      else
        std::cout << std::setprecision(4) << val << std::defaultfloat;
      std::cout << (below ? " is below " : ": NOT below ") << f.expect_val_below << " (--expect-val-below)\n";
    }
    if (!below && code == 0) code = command_line::as_int(example::exit_code::did_not_learn);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  CLI::App app("gpt2: GPT-2 trained, evaluated and run with tensor parallelism on uneven shards", "gpt2");
  command_line::configure(app);
  Gpt2Flags f;
  // Defaults for the small model of byte tokens (the main example): 1200 steps
  // (about a minute on 2 cores, about three passes over the licence texts), a rate a
  // model 96 wide trains well at (GPT-2 small: --lr 6e-4).
  f.steps = 1200;
  f.lr = "3e-3";
  using command_line::integer;
  using command_line::real;
  app.add_option("--layers", f.layers, "transformer blocks (a new model)")->transform(integer(1, 4096));
  app.add_option("--heads", f.heads, "attention heads (a new model; they must divide --width)")
      ->transform(integer(1, 65536));
  app.add_option("--width", f.width, "model width n_embd (a new model)")->transform(integer(1, 1 << 20));
  app.add_option("--context", f.context, "positions n_positions (a new model)")->transform(integer(1, 1 << 24));
  app.add_option("--vocab", f.vocab, "vocabulary (a new model; 257: byte tokens)")->transform(integer(1, 1 << 30));
  app.add_option("--tokenizer", f.tokenizer,
                 "GPT-2's BPE: a directory with vocab.json and merges.txt (or encoder.json and vocab.bpe) for "
                 "--data texts, --generate's prompt and its output");
  app.add_option("--data", f.data,
                 "training text: a UTF-8 file (bytes as tokens), a directory of them, or a .bin of uint16 token ids");
  app.add_option("--val-fraction", f.val_fraction, "the tail of the data held out for validation")
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--batch", f.batch, "sequences per batch")->transform(integer(1));
  app.add_option("--seq", f.seq, "tokens per sequence (at most the context)")->transform(integer(1));
  app.add_option("--steps", f.steps, "the run's training steps in all (a resumed run continues to it)")
      ->transform(integer(0));
  app.add_option("--lr", f.lr, "peak learning rate (AdamW, after the warm-up, then cosine decay)")
      ->check(real(0, true));
  app.add_option("--min-lr-ratio", f.min_lr_ratio, "the learning rate at the last step, over the peak")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup", f.warmup, "warm-up steps")->transform(integer(0));
  app.add_option("--weight-decay", f.weight_decay, "AdamW's decoupled weight decay (matrices and embeddings)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--clip", f.clip, "clip the gradients to this norm (0: no clipping)")->check(real(0, false));
  app.add_option("--eval-every", f.eval_every, "validation loss every N steps (0: never)")->transform(integer(0));
  app.add_option("--eval-batches", f.eval_batches, "batches of the validation loss and of --eval")
      ->transform(integer(1));
  app.add_flag("--eval", f.eval_only, "only print the loaded weights' loss on --data (from its first token) and exit");
  app.add_option("--load", f.load, "a Hugging Face GPT-2: a directory with config.json and model.safetensors");
  app.add_option("--save", f.save,
                 "write config.json and model.safetensors (with the training state) to this directory");
  app.add_option("--save-every", f.save_every, "also save every N steps (0: at the end only)")->transform(integer(0));
  app.add_option("--tune-gemm", f.tune_gemm,
                 "time the host's GEMM kernels on N training steps after the first and keep the fastest per "
                 "shape class (an even N, 6 for two steps of each of three kernels; 0: the start-up choice)")
      ->transform(integer(0, 1 << 20));
  app.add_option("--resume", f.resume, "continue a run from a directory --save wrote (any world size and speeds)");
  app.add_option("--generate", f.prompt, "generate a continuation of this prompt after training");
  app.add_option("--tokens", f.tokens, "tokens to generate")->transform(integer(0));
  app.add_option("--temperature", f.temperature, "0: greedy; else sample from softmax(logits / temperature)")
      ->check(real(0, false));
  app.add_option("--top-k", f.top_k, "sample among the k most likely tokens (0: all)")->transform(integer(0));
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "shard the residual stream and the norms along the tokens (Megatron's sequence parallelism)");
  app.add_flag("--check", f.check, "compare the logits, loss and gradients with the model run unsharded");
  app.add_option("--mesh", f.mesh,
                 "data parallelism: DP groups of TP ranks, each group splitting the model and taking its part of "
                 "every batch; empty: 1 x the world")
      ->check(CLI::Validator(example::check_mesh, "DPxTP", "MESH"));
  example::add_speeds(app, f, 0,
                      "relative speeds, one per rank (of a tensor-parallel group with --mesh; 0: nothing); empty: "
                      "even; auto: measured");
  app.add_option("--seed", f.seed, "seed of the initial weights and of sampling (a resumed run keeps its checkpoint's)")
      ->transform(integer(0));
  app.add_option("--dtype", f.dtype, "element type")->check(CLI::IsMember({"float", "double"}));
  app.add_option("--backend", f.backend, "mpi: host tensors; nccl: GPUs")->check(CLI::IsMember({"mpi", "nccl"}));
  app.add_option("--log", f.log, "rank 0 writes each step's loss, validation loss, lr and time to this CSV file");
  app.add_option("--expect-val-below", f.expect_val_below,
                 "exit with 4 (did not learn) unless the validation loss at the last step is below this (0: no bound)")
      ->check(real(0, false));
  app.callback([&f, &app, ranks = comm.size()] {
    const int group = f.mesh.empty() ? ranks : example::mesh_shape(f.mesh, ranks)[1];
    if (!f.speeds.empty() && f.speeds != "auto")
      if (const std::string why = command_line::check_weights(f.speeds, static_cast<std::size_t>(group)); !why.empty())
        throw CLI::ValidationError("--speeds", why + (f.mesh.empty() ? "" : " of a tensor-parallel group"));
    if (const int groups = f.mesh.empty() ? 1 : example::mesh_shape(f.mesh, ranks)[0]; groups > f.batch)
      throw CLI::ValidationError("--batch", std::to_string(f.batch) + " leaves a data-parallel group of --mesh's " +
                                                std::to_string(groups) + " without a sequence: give " +
                                                std::to_string(groups) + " or more");
    f.generate = app.count("--generate") > 0;
    f.vocab_given = app.count("--vocab") > 0;
    f.seed_given = app.count("--seed") > 0;
    if (f.save_every > 0 && f.save.empty())
      throw CLI::ValidationError("--save-every",
                                 std::to_string(f.save_every) + " saves to --save's directory: give --save DIR");
    if (f.eval_only && f.load.empty()) throw CLI::ValidationError("--eval evaluates loaded weights: give --load DIR");
    if (!f.load.empty() && !f.resume.empty())
      throw CLI::ValidationError("--load and --resume both give the weights: give one");
  });
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run("gpt2", comm.rank(), [&] {
    const auto body = [&](auto t, auto dev) { return run<decltype(t), decltype(dev)>(comm, f); };
    if (f.backend == "mpi") return example::with_dtype(f, [&](auto t) { return body(t, Host{}); });
#if defined(SHARDEX_WITH_GPU)
    if (const std::string why = nccl::unavailable_reason(comm); !why.empty()) {
      if (comm.rank() == 0) std::cout << "gpt2: --backend nccl skipped: " << why << "\n";
      return command_line::as_int(example::exit_code::skip);
    }
    return example::with_dtype(f, [&](auto t) { return body(t, Cuda{}); });
#else
    throw example::refused("--backend nccl: this build has no GPU backend");
#endif
  });
}
