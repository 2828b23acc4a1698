// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `MeshTensor<T, Mesh, per_axis<L_0, ..., L_{n-1}>>`: a rank's local
/// part of a global tensor spread over a mesh, with a layout per mesh axis in
/// its type (mesh/axis_layouts.hpp says what the layouts mean together).
///
/// The local data is one `Tensor`, kept as seen along the last axis (its
/// communicator, layout and lengths; its global shape is the tensor's shape
/// with the dims other axes shard cut to this rank's lengths). Seen along
/// axis k (`along<k>()`), the same local data is a `Tensor` on axis k's
/// sub-communicator with layout L_k: so a transition along axis k is a
/// transition of the table on that communicator, with its adjoint derived
/// exactly as on one axis, and a local operation is the local operation of
/// the local tensors, with its layout rule applied axis by axis.
///
/// Switching the axis a tensor is seen along moves no data and costs no
/// communication; in the reverse pass its gradient is seen back the same way
/// (a "mesh view" node of the graph).
///
/// @code
/// using dp = axis<"dp">; using tp = axis<"tp">;
/// Mesh<dp, tp> mesh(world, {2, 2});
/// // a batch split over dp by 1,3 and a hidden dim whole on tp
/// auto x = MeshTensor<double, Mesh<dp, tp>, per_axis<Sharded<0>, Invariant>>::normal(mesh, {4, 8}, 1, 0.0, 1.0, {{1, 3}, {}});
/// @endcode

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/unpack.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/shape.hpp"
#include "shardex/mesh/axis_layouts.hpp"
#include "shardex/mesh/mesh.hpp"
#include "shardex/tensor/tensor.hpp"
#include "shardex/tensor/transfer.hpp"

namespace shardex {

namespace detail {
/// Calls f(integral_constant<size_t, k>) for k = 0 .. N-1.
template <std::size_t N, class F>
constexpr void for_each_axis(F&& f) {
  hana::for_each(hana::make_range(hana::size_c<0>, hana::size_c<N>), f);
}

/// Static lengths on an axis whose size is static must have that many entries.
template <class M, class Ls>
constexpr bool static_lengths_fit() {
  bool ok = true;
  for_each_axis<Ls::count>([&](auto k) {
    using L = layout_at_t<Ls, decltype(k)::value>;
    if constexpr (is_sharded_v<L> && decltype(k)::value < M::axis_count) {
      constexpr int size = M::template static_size<decltype(k)::value>;
      if constexpr (L::has_static_lengths && size > 0)
        ok = ok && L::lengths_type::count == static_cast<std::size_t>(size);
    }
  });
  return ok;
}
}  // namespace detail

/// @brief A rank's local part of a global tensor spread over mesh M, with
/// one layout per mesh axis (Ls, a per_axis list) in its type (see the
/// file's note). A shared handle, like Tensor.
template <Scalar T, MeshType M, PerAxisLayouts Ls>
class MeshTensor {
  static_assert(Ls::count == M::axis_count, SHARDEX_ERR_MESH_LAYOUT_COUNT);
  static_assert(each_dim_sharded_once<Ls>, SHARDEX_ERR_MESH_DIM_SHARDED_TWICE);
  static_assert(detail::static_lengths_fit<M, Ls>(), SHARDEX_ERR_MESH_STATIC_LENGTHS_COUNT);

public:
  ///@{
  /// The element type, the mesh, the per-axis layouts, the device, the
  /// mappings (one per axis), the number of axes and the last one's index.
  using value_type = T;
  using mesh_type = M;
  using layouts = Ls;
  using device_type = typename M::device_type;
  using mappings_type = typename Ls::mappings;
  static constexpr std::size_t axis_count = M::axis_count;
  static constexpr std::size_t last = axis_count - 1;
  ///@}
  /// The layout along axis I.
  template <std::size_t I>
  using layout_at = layout_at_t<Ls, I>;
  /// The local data, seen along the last axis.
  using inner_type = Tensor<T, layout_at<last>, device_type>;
  /// The gradient's type: the dual layout on every axis.
  using grad_type = MeshTensor<T, M, dual_layouts_t<Ls>>;

  MeshTensor() = default;

  /// Evaluates a lazy transition along an axis (mesh/transitions.hpp).
  template <class E>
  requires requires(const E& e) {
    { e.evaluate() } -> std::same_as<MeshTensor>;
  }
  MeshTensor(const E& e) : MeshTensor(e.evaluate()) {}  // NOLINT(google-explicit-constructor): like Tensor's

  // ---- factories (collective over the mesh's world) --------------------------------
  /// Zeros of global shape `global`, with the lengths of each sharded axis in `ms`.
  static MeshTensor zeros(const M& mesh, const Shape& global, mappings_type ms = {}) {
    agree_on_factory(mesh, global, ms, "shardex::MeshTensor::zeros");
    return zeroed(mesh, global, std::move(ms));
  }

  /// Each rank fills its part with f(global index). On an axis where the
  /// layout is Partial, the value goes to the axis' first rank (coordinate
  /// 0) and the others hold zeros, so the sum is f.
  template <class F>
  requires std::same_as<device_type, Host> && std::invocable<F&, std::span<const std::int64_t>>
  static MeshTensor from_function(const M& mesh, const Shape& global, F&& f, mappings_type ms = {}) {
    MeshTensor t = zeros(mesh, global, std::move(ms));
    bool holds = true;  // false on a non-first rank of a Partial axis
    std::vector<std::int64_t> base(static_cast<std::size_t>(global.rank()), 0);
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      using L = layout_at<i>;
      if constexpr (std::same_as<L, Partial>) holds = holds && mesh.coord(i) == 0;
      if constexpr (is_sharded_v<L>) {
        const auto ls = hana::at_c<i>(t.maps_).lengths();
        for (int r = 0; r < mesh.coord(i); ++r)
          base[static_cast<std::size_t>(L::dim)] += ls[static_cast<std::size_t>(r)];
      }
    });
    if (!holds) return t;
    const Shape& ls = t.local_shape();
    std::vector<std::int64_t> idx(base.size(), 0);
    for (std::int64_t i = 0; i < ls.numel(); ++i) {
      std::int64_t rem = i;
      for (int d = ls.rank() - 1; d >= 0; --d) {
        idx[static_cast<std::size_t>(d)] = rem % ls[d] + base[static_cast<std::size_t>(d)];
        rem /= ls[d];
      }
      t.data()[i] = static_cast<T>(f(std::span<const std::int64_t>(idx)));
    }
    return t;
  }

  /// Normal numbers, the same as `Tensor::normal` draws for each global index
  /// (so a mesh tensor holds the pieces of the tensor an unsharded run draws).
  static MeshTensor normal(const M& mesh, const Shape& global, std::uint64_t seed, T mean = T(0), T stddev = T(1),
                           mappings_type ms = {}) requires std::same_as<device_type, Host> {
    return from_function(
        mesh, global,
        [&](std::span<const std::int64_t> idx) {
          return Tensor<T, Invariant>::normal_at(seed, global, idx, mean, stddev);
        },
        std::move(ms));
  }

  /// This rank's part of a whole value given on every rank (row-major, of
  /// global shape `global`), as `from_function` places it.
  static MeshTensor from_global(const M& mesh, const Shape& global, std::span<const T> values,
                                mappings_type ms = {}) requires std::same_as<device_type, Host> {
    // A wrong count on one rank throws on every rank (through the factory's agreement).
    std::string err;
    if (static_cast<std::int64_t>(values.size()) != global.numel())
      err = std::to_string(values.size()) + " values given for the " + std::to_string(global.numel()) +
            " elements of the global shape";
    agree_on_factory(mesh, global, ms, "shardex::MeshTensor::from_global", err);
    return from_function(
        mesh, global,
        [&](std::span<const std::int64_t> idx) {
          std::int64_t k = 0;
          for (int d = 0; d < global.rank(); ++d) k = k * global[d] + idx[static_cast<std::size_t>(d)];
          return values[static_cast<std::size_t>(k)];
        },
        std::move(ms));
  }

  /// Internal: a tensor from its parts, already checked (results of transitions and local operations).
  static MeshTensor assemble(const M& mesh, const Shape& global, mappings_type ms, inner_type inner) {
    MeshTensor t;
    t.mesh_ = mesh;
    t.global_ = global;
    t.maps_ = std::move(ms);
    t.inner_ = std::move(inner);
    return t;
  }

  // ---- observers ------------------------------------------------------------------------
  /// False for an empty handle (default-constructed or moved-from).
  [[nodiscard]] bool valid() const noexcept { return inner_.valid(); }
  /// Throws `shardex::error` naming `op` if this is an empty handle.
  void require_valid(const char* op) const {
    if (!valid())
      throw error(std::string(op) +
                  ": the mesh tensor is empty (default-constructed or moved-from); assign it one first");
  }
  /// The mesh it lives on.
  [[nodiscard]] const M& mesh() const noexcept { return mesh_; }
  /// The global shape.
  [[nodiscard]] const Shape& shape() const noexcept { return global_; }
  /// The shape of this rank's part (each sharded dim cut to its length here).
  [[nodiscard]] const Shape& local_shape() const noexcept { return inner_.local_shape(); }
  ///@{
  /// The mappings of all axes, or of axis I.
  [[nodiscard]] const mappings_type& mappings() const noexcept { return maps_; }
  template <std::size_t I>
  [[nodiscard]] const layout_mapping<layout_at<I>>& mapping() const noexcept {
    return hana::at_c<I>(maps_);
  }
  ///@}
  /// The local data as the Tensor seen along the last axis.
  [[nodiscard]] const inner_type& inner() const noexcept { return inner_; }
  ///@{
  /// The local elements (row-major, in the device's memory), their number, and
  /// them as a span.
  [[nodiscard]] T* data() const noexcept { return inner_.data(); }
  [[nodiscard]] std::int64_t size() const noexcept { return inner_.size(); }
  [[nodiscard]] std::span<T> local() const noexcept { return inner_.local(); }
  ///@}
  /// Whether this rank holds the first copy of its piece: coordinate 0 on
  /// every axis that does not shard (Invariant, Replicated). Summing over the
  /// ranks that do counts every element of the logical value once (what a
  /// checkpoint writes, what grad_norm adds up).
  [[nodiscard]] bool first_copy() const {
    bool first = true;
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      if constexpr (!is_sharded_v<layout_at<i>>) first = first && mesh_.coord(i) == 0;
    });
    return first;
  }

  /// "dp: S(0)[1,3], tp: R"
  [[nodiscard]] std::string layouts_str() const { return per_axis_name<Ls>(maps_, M::names()); }
  /// "MeshTensor<float64, dp: S(0)[1,3], tp: R> global (4, 8), local (1, 8) at (0, 1) of a 2 x 2 mesh (dp, tp)"
  [[nodiscard]] std::string describe() const {
    if (!valid()) return std::string("MeshTensor<") + dtype_name<T>() + "> (empty)";
    return std::string("MeshTensor<") + dtype_name<T>() + ", " + layouts_str() + "> global " + global_.str() +
           ", local " + local_shape().str() + " on the " + mesh_.str();
  }

  /// The global shape as seen along axis I: every dim another axis shards
  /// cut to this rank's length there (the shape of `along<I>()`).
  template <std::size_t I>
  [[nodiscard]] static Shape axis_shape(const M& mesh, const Shape& global, const mappings_type& ms) {
    Shape s = global;
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t j = decltype(k)::value;
      if constexpr (j != I && is_sharded_v<layout_at<j>>)
        s = s.with(layout_at<j>::dim, hana::at_c<j>(ms).lengths()[static_cast<std::size_t>(mesh.coord(j))]);
    });
    return s;
  }

  /// The local data as a `Tensor` on axis I's communicator, layout L_I; in
  /// the graph when this tensor is (its gradient is seen back the same way).
  template <std::size_t I>
  [[nodiscard]] Tensor<T, layout_at<I>, device_type> along() const {
    require_valid("shardex::MeshTensor::along");
    if constexpr (I == last) {
      return inner_;
    } else {
      return view_as<layout_at<I>>(inner_, mesh_.comm(I), axis_shape<I>(mesh_, global_, maps_), mapping<I>());
    }
  }

  /// The tensor whose axis I is seen as `out` (the result of a transition
  /// of `along<I>()`), the other axes as here.
  template <std::size_t I, LayoutTag L2>
  [[nodiscard]] auto with_axis(const Tensor<T, L2, device_type>& out) const {
    using R = MeshTensor<T, M, replace_at_t<Ls, I, L2>>;
    auto ms = hana::unpack(hana::make_range(hana::size_c<0>, hana::size_c<axis_count>),
                           [&](auto... k) { return typename R::mappings_type(pick<I>(k, out.mapping())...); });
    if constexpr (I == last) {
      return R::assemble(mesh_, global_, std::move(ms), out);
    } else {
      const Shape s = R::template axis_shape<last>(mesh_, global_, ms);
      auto in = view_as<typename R::template layout_at<last>>(out, mesh_.comm(last), s, hana::at_c<last>(ms));
      return R::assemble(mesh_, global_, std::move(ms), std::move(in));
    }
  }

  /// The facts every rank of the mesh must share (global shape, layouts,
  /// lengths of every axis): a signature for the cross-rank agreement.
  [[nodiscard]] detail::Signature signature() const {
    detail::Signature sig;
    sig.add(dtype_name<T>());
    for (auto e : global_.extents()) sig.add(e);
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      sig.add(layout_name<layout_at<i>>());
      if constexpr (is_sharded_v<layout_at<i>>)
        for (auto l : hana::at_c<i>(maps_).lengths()) sig.add(l);
    });
    return sig;
  }

  /// Every rank of the mesh's world holds the same global facts, or every
  /// rank throws (lengths computed differently in two groups of an axis agree
  /// within each group, and would fail later in one group only).
  void agree_across_mesh(const std::string& op) const {
    detail::agree(mesh_.world(), "", signature(), [&] {
      return op + " on world rank " + std::to_string(mesh_.world().rank()) + " (result " + describe() + ")";
    });
  }

  // ---- autodiff ---------------------------------------------------------------------------
  /// Marks this tensor as a leaf of the graph (a parameter) and returns it.
  MeshTensor& requires_grad() {
    inner_.requires_grad();
    return *this;
  }
  /// Whether the tensor is in the autodiff graph.
  [[nodiscard]] bool is_differentiable() const noexcept { return inner_.is_differentiable(); }
  /// Whether backward() has given it a gradient (since the last zero_grad()).
  [[nodiscard]] bool has_grad() const noexcept { return inner_.has_grad(); }
  /// The gradient, dual layout on every axis.
  [[nodiscard]] grad_type grad() const {
    if (!has_grad())
      throw error("shardex::MeshTensor::grad(): " + describe() + " has no gradient" +
                  (is_differentiable() ? " yet; call backward(loss) on a loss that depends on it"
                                       : "; call requires_grad() on it first"));
    return grad_type::assemble(mesh_, global_, dual_mappings(), inner_.grad());
  }
  /// The lengths of the gradient's layouts (those of this tensor, axis by axis).
  [[nodiscard]] typename grad_type::mappings_type dual_mappings() const {
    return hana::unpack(hana::make_range(hana::size_c<0>, hana::size_c<axis_count>), [&](auto... k) {
      return typename grad_type::mappings_type(
          dual_mapping<layout_at<decltype(k)::value>>(hana::at_c<decltype(k)::value>(maps_))...);
    });
  }
  /// Forgets the gradient.
  void zero_grad() const { inner_.zero_grad(); }
  /// The same data, outside the graph.
  [[nodiscard]] MeshTensor detach() const { return assemble(mesh_, global_, maps_, inner_.detach()); }

private:
  template <std::size_t I, class K, class Out>
  auto pick(K, const Out& out) const {
    if constexpr (decltype(K())::value == I)
      return out;
    else
      return hana::at_c<decltype(K())::value>(maps_);
  }

  /// `x`'s local data as a tensor on `comm` (layout L, shape, mapping), with
  /// a graph node that hands its gradient back to x's, seen as x's.
  template <LayoutTag L, LayoutTag LX, class Comm>
  static Tensor<T, L, device_type> view_as(const Tensor<T, LX, device_type>& x, const Comm& comm, const Shape& shape,
                                           layout_mapping<L> m) {
    auto v = x.template reseat<L>(comm, shape, std::move(m));
    if (x.node()) {
      // What the gradient needs of x, not x itself (whose data it would keep alive).
      v.record("mesh view", {x.node()},
               [node = x.node(), xc = x.comm(), xs = x.shape(),
                xm = dual_mapping<LX>(x.mapping())](const Tensor<T, dual_t<L>, device_type>& g) {
                 node->accumulate(g.template reseat<dual_t<LX>>(xc, xs, xm));
               });
    }
    return v;
  }

  /// The lengths of every sharded axis fit the global shape and that axis'
  /// size, and are the same on every rank (else every rank throws).
  static void agree_on_factory(const M& mesh, const Shape& global, const mappings_type& ms, const char* op,
                               std::string err = {}) {
    if (err.empty()) err = shape_problem(global);
    detail::Signature sig;
    sig.add(op).add(dtype_name<T>());
    for (auto e : global.extents()) sig.add(e);
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      using L = layout_at<i>;
      sig.add(layout_name<L>());
      if constexpr (is_sharded_v<L>) {
        if (err.empty()) {
          if (const std::string bad = mapping_problem<L>(hana::at_c<i>(ms), global, mesh.size(i)); !bad.empty())
            err = "on axis " + std::string(M::names()[i]) + " (size " + std::to_string(mesh.size(i)) + "), layout " +
                  layout_name(hana::at_c<i>(ms)) + ": " + bad;
          else
            for (auto l : hana::at_c<i>(ms).lengths()) sig.add(l);
        }
      }
    });
    const auto call = [&] {
      return std::string(op) + " on world rank " + std::to_string(mesh.world().rank()) + " (" + mesh.str() +
             "), global shape " + global.str() + ", layouts " + layout_names();
    };
    if (!err.empty()) err = call() + ": " + err;
    detail::agree(mesh.world(), err, sig, call);
  }
  static std::string layout_names() {
    std::string s;
    detail::for_each_axis<axis_count>([&](auto k) {
      constexpr std::size_t i = decltype(k)::value;
      s += (i ? ", " : "") + std::string(M::names()[i]) + ": " + layout_name<layout_at<i>>();
    });
    return s;
  }

  static MeshTensor zeroed(const M& mesh, const Shape& global, mappings_type ms) {
    const Shape s = axis_shape<last>(mesh, global, ms);
    auto in = inner_type::zeroed(mesh.comm(last), s, hana::at_c<last>(ms));
    return assemble(mesh, global, std::move(ms), std::move(in));
  }

  M mesh_;
  Shape global_;
  mappings_type maps_;
  inner_type inner_;
};

namespace detail {
template <class T>
struct is_mesh_tensor : std::false_type {};
template <class T, class M, class Ls>
struct is_mesh_tensor<MeshTensor<T, M, Ls>> : std::true_type {};
}  // namespace detail
/// True for a MeshTensor.
template <class X>
inline constexpr bool is_mesh_tensor_v = detail::is_mesh_tensor<X>::value;

/// A host mesh tensor moved to the same-shaped mesh of another device (its
/// local part uploaded; the layouts and lengths as they are). Collective.
template <class Dev, Scalar T, MeshAxis... Axes, PerAxisLayouts Ls>
MeshTensor<T, DeviceMesh<Dev, Axes...>, Ls> to_mesh(const MeshTensor<T, DeviceMesh<Host, Axes...>, Ls>& x,
                                                    const DeviceMesh<Dev, Axes...>& mesh) {
  x.require_valid("shardex::to_mesh");
  if (mesh.sizes() != x.mesh().sizes() || mesh.coords() != x.mesh().coords())
    throw invalid_argument("shardex::to_mesh on world rank " + std::to_string(mesh.world().rank()) + ": the " +
                           mesh.str() + " is not the shape of the " + x.mesh().str());
  using R = MeshTensor<T, DeviceMesh<Dev, Axes...>, Ls>;
  return R::assemble(mesh, x.shape(), x.mappings(), to<Dev>(x.inner().detach(), mesh.comm(R::last)));
}

}  // namespace shardex
