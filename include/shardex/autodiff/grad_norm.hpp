// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `grad_norm(params...)`: the 2-norm of the parameters' gradients as
/// the unsharded model has it, every element of every logical gradient
/// counted once whatever layout holds it: a Sharded gradient's pieces are
/// summed over the ranks, an Invariant one (the same on every rank) is
/// counted once, not once per rank (the classic double count of
/// tensor-parallel gradient clipping). One all-reduce of one double.
/// `clip_grad_norm(max_norm, params...)` then scales every gradient by
/// max_norm / (norm + 1e-6) when that is below one (PyTorch's
/// clip_grad_norm_), and returns the norm.
///
/// @code
/// backward(loss);
/// const double norm = clip_grad_norm(1.0, A, a, B, b);
/// sgd_step(lr, A, a, B, b);
/// @endcode
///
/// Parameters are Invariant or Sharded (their gradient has their own layout,
/// as for sgd_step): a Replicated parameter's gradient is Partial, whose
/// norm is not its parts' norms, and is refused at compile time. Mesh
/// parameters (mesh/training.hpp) take part the same way. A parameter with
/// no gradient adds nothing. Every rank gets the same norm; ranks passing
/// different parameter lists, or parameters of different communicators,
/// throw on every rank.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/host_device.hpp"
#include "shardex/device/device.hpp"
#include "shardex/tensor/tensor.hpp"

namespace shardex {

/// How a kind of parameter takes part in `grad_norm`: the host communicator
/// all of a call's parameters share, the sum of squares of the part of the
/// logical gradient this rank counts, and the scaling of its gradient.
/// Specialized for Tensor here and for MeshTensor in mesh/training.hpp.
template <class P>
struct grad_norm_part;

namespace detail {

/// The sum of squares of n elements on device Dev, accumulated in double on
/// the host; on a device, one dot product (a 1 x n by n x 1 GEMM).
template <class Dev, Scalar T>
double sum_of_squares(const T* x, std::int64_t n) {
  if (n == 0) return 0.0;
  if constexpr (std::same_as<Dev, Host>) {
    // In vector lanes (a scalar sum is one chain of dependent additions: 4x
    // slower over GPT-2's 62 M gradients per rank), and over the four
    // quarters at once: one core reads one sequential stream at half the
    // memory bandwidth that four give it (25 -> 19 ms over those 62 M,
    // bench/RESULTS.md).
    const std::int64_t q = n / 4;
    const T *x0 = x, *x1 = x + q, *x2 = x + 2 * q, *x3 = x + 3 * q;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    SHARDEX_PRAGMA(omp simd reduction(+ : s0, s1, s2, s3))
    for (std::int64_t i = 0; i < q; ++i) {
      const double y0 = static_cast<double>(x0[i]), y1 = static_cast<double>(x1[i]);
      const double y2 = static_cast<double>(x2[i]), y3 = static_cast<double>(x3[i]);
      s0 += y0 * y0, s1 += y1 * y1, s2 += y2 * y2, s3 += y3 * y3;
    }
    double s = (s0 + s1) + (s2 + s3);
    for (std::int64_t i = 4 * q; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return s;
  } else {
    auto out = Dev::template allocate<T>(1);
    Dev::gemm(GemmShape::plain(1, n, 1), T(1), x, x, T(0), out.get());
    T host = 0;
    Dev::download(&host, out.get(), 1);
    return static_cast<double>(host);
  }
}

}  // namespace detail

/// A Tensor parameter in grad_norm: Invariant or Sharded (its own gradient's layout).
template <Scalar T, LayoutTag L, class Dev>
struct grad_norm_part<Tensor<T, L, Dev>> {
  ///@{
  /// The parameter type P and the grad_norm_part interface: the host
  /// communicator of P's backend, the global shape, the squares this rank
  /// counts, the scaling of the gradient.
  using P = Tensor<T, L, Dev>;
  static_assert(std::same_as<dual_t<L>, L>, SHARDEX_ERR_GRAD_NORM_NOT_SELF_DUAL);
  static const mpi::Communicator& comm(const P& p) { return detail::control_of(p.comm()); }
  static const Shape& shape(const P& p) { return p.shape(); }
  /// Sharded: this rank's piece. Invariant: rank 0 counts it, the others add nothing.
  static double counted_squares(const P& p) {
    if (!p.has_grad() || (!is_sharded_v<L> && p.rank() != 0)) return 0.0;
    return detail::sum_of_squares<Dev>(p.grad().data(), p.grad().size());
  }
  static void scale_grad(const P& p, double factor) {
    if (p.has_grad()) Dev::axpy(p.grad().size(), static_cast<T>(factor - 1), p.grad().data(), p.grad().data());
  }
  ///@}
};

/// grad_norm's squares taken during backward(): each watched parameter's
/// counted squares (grad_norm_part::counted_squares) computed by the reverse
/// pass as soon as it has completed that gradient (Tensor::on_grad_complete),
/// while it is in cache after the product that made it, instead of in a pass
/// of its own over every gradient afterwards (GPT-2 small: 62 M gradients a
/// rank, bench/RESULTS.md "The weight gradients' zeroing, and the clipping's
/// squares in the backward").
///
/// @code
/// GradSquares squares;
/// squares.watch(A), squares.watch(b);  // once
/// backward(loss);                      // each step
/// const double norm = squares.norm(comm);
/// @endcode
///
/// The gradients must not change between backward() and norm(); a watched
/// parameter whose gradient no pass has completed since the last norm() (one
/// set by other means, or a parameter that was the pass's root) is summed by
/// norm() itself. Tensor parameters only (a mesh parameter's inner tensor
/// would count an Invariant-on-dp gradient once per dp group). Unlike
/// grad_norm, norm() makes no cross-rank check that the ranks watch the same
/// list. On a GPU each parameter's squares are a dot product downloaded to
/// the host, as grad_norm's are, but inside the pass. A moved-from
/// GradSquares is not to be used.
class GradSquares {
public:
  /// Watches nothing yet.
  GradSquares() = default;
  GradSquares(const GradSquares&) = delete;
  GradSquares& operator=(const GradSquares&) = delete;
  /// Takes over `other`'s parameters and hooks (`other` then watches nothing).
  GradSquares(GradSquares&& other) noexcept = default;
  GradSquares& operator=(GradSquares&&) = delete;
  /// Removes the hooks it set.
  ~GradSquares() {
    for (auto& w : watched_) w.node->grad_complete = nullptr;
  }

  /// Watches parameter p (Invariant or Sharded, as for grad_norm) through
  /// its one grad_complete hook.
  /// @throws error if p is not a parameter or already has a hook (another
  /// GradSquares', or the user's), which this one would replace.
  template <Scalar T, LayoutTag L, class Dev>
  void watch(const Tensor<T, L, Dev>& p) {
    if (p.node() && p.node()->is_leaf() && p.node()->grad_complete)
      throw error("shardex::GradSquares::watch: " + p.describe() +
                  " already has an on_grad_complete hook (watched twice?)");
    Watched w{p.node(), [p] { return grad_norm_part<Tensor<T, L, Dev>>::counted_squares(p); }};
    watched_.reserve(watched_.size() + 1);
    slots_->reserve(slots_->size() + 1);
    const std::size_t i = slots_->size();  // == watched_.size(): nothing below throws once the hook is set
    // An Invariant gradient counts on rank 0 (an init-capture: for a Sharded
    // one the value is a constant, which clang would not have captured).
    p.on_grad_complete([slots = slots_, i, counts = is_sharded_v<L> || p.rank() == 0](const Tensor<T, L, Dev>& g) {
      (*slots)[i] = {counts ? detail::sum_of_squares<Dev>(g.data(), g.size()) : 0.0, true};
    });
    slots_->push_back({});
    watched_.push_back(std::move(w));
  }

  /// Collective over `comm` (the parameters' host communicator): the 2-norm
  /// of the watched parameters' logical gradients, as grad_norm gives it.
  [[nodiscard]] double norm(const mpi::Communicator& comm) {
    double counted = 0.0;
    for (std::size_t i = 0; i < watched_.size(); ++i) {
      Slot& s = (*slots_)[i];
      if (watched_[i].node->has_grad()) counted += s.taken ? s.squares : watched_[i].direct();
      s = {};
    }
    if (comm.size() > 1) comm.all_reduce(&counted, 1);
    return std::sqrt(counted);
  }

private:
  struct Slot {
    double squares = 0.0;
    bool taken = false;  // by a pass, since the last norm()
  };
  struct Watched {
    std::shared_ptr<autodiff::Node> node;  // the parameter's: its gradient's presence, its hook
    std::function<double()> direct;        // counted_squares, for a gradient no pass completed
  };
  std::shared_ptr<std::vector<Slot>> slots_ = std::make_shared<std::vector<Slot>>();
  std::vector<Watched> watched_;
};

/// Collective over the parameters' communicator: the 2-norm of the logical
/// gradients of `params` (see the file's comment).
template <class P0, class... P>
double grad_norm(const P0& first, const P&... rest) {
  const mpi::Communicator& comm = grad_norm_part<P0>::comm(first);
  std::string err;
  detail::Signature sig;
  sig.add("shardex::grad_norm").add(static_cast<std::int64_t>(1 + sizeof...(P)));
  double counted = 0.0;
  const auto take = [&]<class X>(const X& p) {
    p.require_valid("shardex::grad_norm");
    const mpi::Communicator& c = grad_norm_part<X>::comm(p);
    if (err.empty() && (c.size() != comm.size() || c.rank() != comm.rank()))
      err = "shardex::grad_norm on rank " + std::to_string(comm.rank()) +
            ": the parameters live on different communicators (" + std::to_string(comm.size()) + " and " +
            std::to_string(c.size()) + " ranks)";
    for (auto e : grad_norm_part<X>::shape(p).extents()) sig.add(e);
    counted += grad_norm_part<X>::counted_squares(p);
  };
  take(first);
  (take(rest), ...);
  detail::agree(comm, err, sig,
                [&] { return "shardex::grad_norm of " + std::to_string(1 + sizeof...(P)) + " parameters"; });
  if (comm.size() > 1) comm.all_reduce(&counted, 1);
  return std::sqrt(counted);
}

/// Collective: scales the gradients of `params` so that their norm is at
/// most `max_norm` (by max_norm / (norm + 1e-6) when that is below one) and
/// returns their norm before the scaling. A norm that is not finite (a step
/// that diverged) throws on every rank, leaving the gradients as they are.
template <class P0, class... P>
double clip_grad_norm(double max_norm, const P0& first, const P&... rest) {
  if (!(max_norm > 0))
    throw invalid_argument("shardex::clip_grad_norm: max_norm must be positive, not " + std::to_string(max_norm));
  const double norm = grad_norm(first, rest...);
  if (!std::isfinite(norm))
    throw error("shardex::clip_grad_norm: the gradients' norm is " + std::to_string(norm) +
                " (the step diverged: lower the learning rate, or look for an inf or nan in the loss)");
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) {
    grad_norm_part<P0>::scale_grad(first, factor);
    (grad_norm_part<P>::scale_grad(rest, factor), ...);
  }
  return norm;
}

}  // namespace shardex
