// SPDX-License-Identifier: MIT
#pragma once
// What the examples share and is not the point of any of them: flags, the
// lengths of an uneven split, timing, and comparing with the unsharded run.
// The command line itself (CLI11, exit codes) is in command_line.hpp, which
// the bench programs share.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#if defined(SHARDEX_WITH_GPU)
#include <shardex/cuda.hpp>
#else
#include <shardex.hpp>
#endif
#include <shardex/device/calibrate.hpp>

#include "command_line.hpp"

namespace example {

using command_line::diverged;
using command_line::exit_code;
using command_line::refused;
using command_line::usage_error;

/// The flags every training example takes, with their defaults; each example
/// adds its own (sizes, --lr, --speeds) in the `declare` it gives main below.
struct Flags {
  std::int64_t steps = 20, batches = 4, seed = 1;
  std::string lr = "auto";  // a number, or "auto" where the example has a rule for it (learning_rate)
  std::string dtype = "double", backend = "mpi", log;
  std::string speeds;  // "", "auto" or one weight per rank (see speeds below)
};

/// --lr: a number > 0, or (with `per_hidden`, the rule of learning_rate) "auto".
inline void add_lr(CLI::App& app, Flags& f, bool with_auto) {
  if (!with_auto) {
    app.add_option("--lr", f.lr, "learning rate")->check(command_line::real(0, true));
    return;
  }
  const auto number = command_line::real(0, true);
  app.add_option("--lr", f.lr, "learning rate; auto: a rate that shrinks with --hidden")
      ->check(CLI::Validator([number](std::string& s) { return s == "auto" ? std::string() : number(s); },
                             "NUMBER>0|auto", "LR"));
}

/// --speeds: the ranks' relative speeds, one per rank of the world (`ranks`;
/// 0: any count, which the caller checks).
inline void add_speeds(CLI::App& app, Flags& f, int ranks,
                       const std::string& help =
                           "relative speeds, one per rank (0: nothing); empty: even; auto: "
                           "measured") {
  app.add_option("--speeds", f.speeds, help)
      ->check(CLI::Validator(
          [ranks](const std::string& s) {
            return s.empty() || s == "auto" ? std::string()
                                            : command_line::check_weights(s, static_cast<std::size_t>(ranks));
          },
          "W,W,...|auto", "SPEEDS"));
}

/// "3x2" -> {3, 2}; empty: the squarest dp x tp shape of the world (dp <= tp).
/// (check_mesh checked the form.)
inline std::array<int, 2> mesh_shape(const std::string& s, int world) {
  if (s.empty()) {
    int d = 1;
    for (int k = 1; k * k <= world; ++k)
      if (world % k == 0) d = k;
    return {d, world / d};
  }
  const auto x = s.find('x');
  return {static_cast<int>(*command_line::read_integer(s.substr(0, x))),
          static_cast<int>(*command_line::read_integer(s.substr(x + 1)))};
}

/// --mesh: empty, or DPxTP with two whole numbers >= 1.
inline std::string check_mesh(const std::string& s) {
  const auto x = s.find('x');
  const auto axis = [](const std::string& t) {
    const auto v = command_line::read_integer(t);
    return v && *v >= 1 && *v <= 1 << 20;
  };
  if (s.empty() || (x != std::string::npos && axis(s.substr(0, x)) && axis(s.substr(x + 1)))) return {};
  return "'" + s + "' is not DPxTP, two whole numbers >= 1 such as 3x2";
}

/// The ranks' relative speeds from --speeds: "1,2,3,4" (one per rank; a zero
/// gives a rank nothing), empty for even, or "auto": measured, each rank timing
/// a product of the model's shape `gemm` on its device (shardex::measure_speeds).
template <class Dev, class T>
std::vector<double> speeds(const shardex::mpi::Communicator& comm, const Flags& f, const shardex::GemmShape& gemm) {
  if (f.speeds == "auto") {
    shardex::CalibrationOptions o;
    o.gemm = gemm;
    const auto w = shardex::measure_speeds<Dev, T>(comm, o);
    if (comm.rank() == 0) {
      std::cout << "--speeds auto: measured GFLOP/s per rank";
      for (double s : w) std::cout << " " << std::setprecision(3) << s;
      std::cout << std::defaultfloat << "\n";
    }
    return w;
  }
  if (f.speeds.empty()) return std::vector<double>(static_cast<std::size_t>(comm.size()), 1.0);
  return command_line::weights(f.speeds);  // add_speeds checked them: one per rank
}

/// Lengths of `total` in proportion to the speeds (summing to total).
inline std::vector<std::int64_t> split(std::int64_t total, const std::vector<double>& speeds) {
  return shardex::proportional_lengths(total, speeds);
}

/// max |a - b| / max(1, |b|) over the local elements of two host tensors of
/// the same shape; NaN if either holds a NaN or an infinity (a NaN compares
/// false, so a plain max would report it as no difference at all).
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double x = a.data()[i], y = b.data()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) return NAN;
    m = std::max(m, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return m;
}

/// The learning rate: --lr, or for "auto" `per_hidden / hidden` (the
/// gradients grow with the width, so a fixed rate that trains a small model
/// makes a wide one diverge).
inline double learning_rate(const Flags& f, double per_hidden, std::int64_t hidden) {
  if (f.lr == "auto") return per_hidden / double(hidden);
  return *command_line::read_real(f.lr);  // add_lr checked it
}

/// Stops a run whose loss is no longer finite, with the likely cause.
inline void check_finite_loss(double loss, std::int64_t step, double lr) {
  if (std::isfinite(loss)) return;
  std::ostringstream s;
  s << "the loss is " << loss << " at step " << step << ": training diverged; lower the learning rate (--lr, now " << lr
    << ")";
  throw diverged(s.str());
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace example

namespace example {

// ---- the device a model runs on (--backend mpi: Host; --backend nccl: Cuda) ----

/// The communicator of Dev's backend over the ranks of `comm`.
template <class Dev>
typename Dev::communicator device_comm(const shardex::mpi::Communicator& comm) {
  if constexpr (std::same_as<Dev, shardex::Host>) return comm;
#if defined(SHARDEX_WITH_GPU)
  else
    return shardex::nccl::Communicator::create(comm);
#endif
}

/// Normal numbers drawn on the host (the same numbers whatever the device, so
/// a GPU run can be compared with the host run), then moved to Dev.
template <class Dev, class T, shardex::LayoutTag L>
shardex::Tensor<T, L, Dev> normal(const typename Dev::communicator& comm, const shardex::Shape& global,
                                  std::uint64_t seed, T mean = T(0), T stddev = T(1),
                                  shardex::layout_mapping<L> m = {}) {
  auto h = shardex::Tensor<T, L>::normal(shardex::detail::control_of(comm), global, seed, mean, stddev, std::move(m));
  if constexpr (std::same_as<Dev, shardex::Host>)
    return h;
  else
    return shardex::to<Dev>(h, comm);
}

/// A copy of x on the host, outside the graph (later steps do not change it).
template <class T, shardex::LayoutTag L, class Dev>
shardex::Tensor<T, L> on_host(const shardex::Tensor<T, L, Dev>& x) {
  if constexpr (std::same_as<Dev, shardex::Host>)
    return x.detach().clone();
  else
    return shardex::to<shardex::Host>(x.detach());
}

/// The value of a one-element tensor (a loss), on the host.
template <class T, shardex::LayoutTag L, class Dev>
double value(const shardex::Tensor<T, L, Dev>& x) {
  if constexpr (std::same_as<Dev, shardex::Host>)
    return double(x.data()[0]);
  else
    return double(on_host(x).data()[0]);
}

/// The training data cycles through `batches` fixed batches; the mean loss of
/// the first pass over them against that of the last says whether it learned.
inline std::pair<double, double> first_and_last_pass(const std::vector<double>& losses, std::int64_t batches) {
  const std::size_t k =
      std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(batches), losses.size() / 2));
  double first = 0, last = 0;
  for (std::size_t i = 0; i < k; ++i) first += losses[i], last += losses[losses.size() - 1 - i];
  return {first / double(k), last / double(k)};
}

/// What a training run keeps: every step's loss, and the last step's output
/// and gradients, each gathered whole and named.
template <class T>
struct Run {
  std::vector<double> losses;
  std::vector<double> step_ms;     // each step's wall time on this rank
  std::vector<double> grad_norms;  // each step's gradient norm, where the example clips (--clip)
  std::vector<std::pair<std::string, shardex::Tensor<T, shardex::Invariant>>> last;
};

/// Ends a step: records its time, and (if `report`) prints
/// "step   3  loss 0.123456  time 0.52 ms" on rank 0 (with "  grad norm 1.234"
/// where the step recorded one).
template <class Comm, class T>
void end_step(const Comm& comm, Run<T>& run, std::int64_t step, std::chrono::steady_clock::time_point t0, bool report) {
  run.step_ms.push_back(seconds_since(t0) * 1e3);
  if (!report || comm.rank() != 0) return;
  std::cout << "step " << std::setw(3) << step << "  loss " << std::setprecision(6) << std::fixed << run.losses.back()
            << "  time " << std::setprecision(2) << run.step_ms.back() << " ms";
  if (run.grad_norms.size() == run.losses.size())
    std::cout << "  grad norm " << std::setprecision(4) << run.grad_norms.back();
  std::cout << "\n" << std::defaultfloat;
}

/// --log PATH: rank 0 writes every step's loss (sharded and unsharded) and
/// time as CSV (step,loss,unsharded_loss,step_ms); scripts/plot_losses.py draws it.
template <class T>
void write_log(const shardex::mpi::Communicator& comm, const Flags& f, const Run<T>& sharded, const Run<T>& whole) {
  const std::string& path = f.log;
  if (path.empty() || comm.rank() != 0) return;
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--log " + path + ": cannot open the file for writing");
  out << "step,loss,unsharded_loss,step_ms\n" << std::setprecision(10);
  for (std::size_t i = 0; i < sharded.losses.size(); ++i)
    out << i << ',' << sharded.losses[i] << ',' << (i < whole.losses.size() ? whole.losses[i] : NAN) << ','
        << (i < sharded.step_ms.size() ? sharded.step_ms[i] : NAN) << '\n';
  if (!out) throw std::runtime_error("--log " + path + ": writing failed");
}

/// The tolerance of the comparison with the unsharded run.
template <class T>
constexpr double tolerance = std::same_as<T, double> ? 1e-10 : 1e-4;

/// Prints (rank 0) the largest relative difference of each named quantity
/// between the sharded and the unsharded run, and the mean loss of the first
/// and the last pass over the batches; returns the exit code: 0 if every
/// difference is within the tolerance on every rank and the loss went down,
/// else exit_code::differs (a difference beyond it) or did_not_learn.
template <class T>
int verdict(const shardex::mpi::Communicator& comm, const Run<T>& sharded, const Run<T>& whole, const Flags& f) {
  const std::int64_t batches = f.batches;
  const double tol = tolerance<T>;
  double worst = sharded.last.size() == whole.last.size() ? 0 : INFINITY;
  std::ostringstream diffs;
  for (std::size_t i = 0; i < sharded.last.size() && i < whole.last.size(); ++i) {
    const double d = max_rel_diff(sharded.last[i].second, whole.last[i].second);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    diffs << " " << sharded.last[i].first << " " << std::scientific << std::setprecision(2) << d;
  }
  std::int64_t bad[1] = {worst <= tol ? 0 : -1};
  comm.all_reduce_min(bad, 1);         // any rank out of tolerance fails all
  write_log(comm, f, sharded, whole);  // after the last collective: a path rank 0 cannot write fails there alone
  const auto& losses = sharded.losses;
  if (losses.empty()) {
    if (comm.rank() == 0) std::cout << "no step ran (--steps 0): nothing to compare\n";
    return 0;
  }
  // Whether it learned needs two passes over the batches to compare.
  const bool judged = static_cast<std::int64_t>(losses.size()) >= 2 * std::max<std::int64_t>(batches, 1);
  const auto [first, last] = first_and_last_pass(losses, batches);
  const bool learned = last < first;
  if (comm.rank() == 0)
    std::cout << "max relative difference from the unsharded model:" << diffs.str() << "  (tolerance "
              << std::scientific << std::setprecision(2) << tol << ")\n"
              << std::defaultfloat << "mean loss over the batches, first pass " << first << " -> last pass " << last
              << (!judged   ? " (too few steps to judge: fewer than two passes over the batches)"
                  : learned ? " (went down)"
                            : " (DID NOT GO DOWN)")
              << "\n";
  if (comm.rank() == 0 && bad[0] != 0)
    std::cout << "the sharded run differs from the unsharded one beyond the tolerance\n";
  if (bad[0] != 0) return command_line::as_int(exit_code::differs);
  return command_line::as_int(learned || !judged ? exit_code::ok : exit_code::did_not_learn);
}

/// Runs `body` on the tensor type the --dtype flag names.
template <class F>
int with_dtype(const Flags& f, F&& body) {
  if (f.dtype == "float") return body(float{});
  return body(double{});  // the flag's check leaves float or double
}

/// The examples' main: MPI, the flags, errors as messages on stderr and exit
/// codes (examples/support/command_line.hpp). `declare(app, flags, ranks)`
/// adds the example's own flags (into its `flags`, a struct derived from
/// Flags, given with its defaults) to the common ones (--steps, --batches,
/// --seed, --dtype, --backend, --log); then `body(comm, flags, T{}, Dev{})`
/// runs with the element type of --dtype and the device of --backend (mpi:
/// Host; nccl: Cuda, or exit code 77, a skip, when this machine cannot run
/// NCCL, saying why).
template <class Fl, class Declare, class Body>
int main(int argc, char** argv, const char* name, const char* about, Fl flags, Declare&& declare, Body&& body) {
  shardex::mpi::Environment env(argc, argv);
  const auto comm = shardex::mpi::Communicator::world();
  CLI::App app(std::string(name) + ": " + about, name);
  command_line::configure(app);
  declare(app, flags, comm.size());
  Flags& f = flags;
  app.add_option("--steps", f.steps, "training steps (0: none, nothing to compare)")
      ->transform(command_line::integer(0));
  app.add_option("--batches", f.batches, "fixed batches the data cycles through")->transform(command_line::integer(1));
  app.add_option("--seed", f.seed, "seed of the weights and the data")->transform(command_line::integer(0));
  app.add_option("--dtype", f.dtype, "element type")->check(CLI::IsMember({"float", "double"}));
  app.add_option("--backend", f.backend, "mpi: host tensors; nccl: GPUs")->check(CLI::IsMember({"mpi", "nccl"}));
  app.add_option("--log", f.log, "rank 0 writes each step's loss and time to this CSV file");
  if (const auto code = command_line::parse(app, argc, argv, comm.rank())) return *code;
  return command_line::run(name, comm.rank(), [&] {
    if (f.backend == "mpi") return with_dtype(f, [&](auto t) { return body(comm, flags, t, shardex::Host{}); });
#if defined(SHARDEX_WITH_GPU)
    if (const std::string why = shardex::nccl::unavailable_reason(comm); !why.empty()) {
      if (comm.rank() == 0) std::cout << name << ": --backend nccl skipped: " << why << "\n";
      return command_line::as_int(exit_code::skip);
    }
    return with_dtype(f, [&](auto t) { return body(comm, flags, t, shardex::Cuda{}); });
#else
    throw refused(
        "--backend nccl: this build has no GPU backend (nvcc, cuBLAS or NCCL were not found when "
        "it was configured, or -Dcuda=disabled)");
#endif
  });
}

}  // namespace example
