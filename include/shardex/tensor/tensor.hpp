// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `Tensor<T, Layout, Device>`: a rank's local part of a global tensor,
/// with the layout in the type.
///
/// A tensor is a shared handle (like a `torch.Tensor`): copying it shares the
/// storage; `clone()` copies the data. It knows its communicator, its global
/// shape, its layout mapping (the lengths of a `Sharded` layout) and so the
/// shape of its local part. Storage is row-major, owned or a view of user memory.
///
/// @code
/// // rank r holds columns [off_r, off_r + len_r) of a 5 x 10 tensor
/// auto p = Tensor<float, Sharded<1, lengths<1, 2, 3, 4>>>::ones(comm, {5, 10});
/// p.local_shape();   // (5, r + 1)
/// @endcode

#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/core/shape.hpp"
#include "shardex/core/trace.hpp"
#include "shardex/device/host/host.hpp"
#include "shardex/layout/layouts.hpp"
#include "shardex/layout/mapping.hpp"
#include "shardex/lower/backend.hpp"
#include "shardex/tensor/grad_node.hpp"
#include "shardex/tensor/tensor_fwd.hpp"

namespace shardex {

namespace detail {
/// The name of an evaluated expression's span in a trace (core/trace.hpp): its
/// root's, as explain() names it (a layer's node_name, a transition's name, such
/// as "all_reduce", "matmul", the outermost op of an element-wise tree), so that
/// a forward's time reads by operation; "eval" for any other root. The span
/// holds the root's operands too, where they are expressions evaluated with it.
template <class E>
constexpr const char* eval_span_name(const E& e) {
  if constexpr (requires {
                  { E::node_name } -> std::convertible_to<const char*>;
                })
    return E::node_name;
  else if constexpr (requires {
                       { e.name() } -> std::same_as<const char*>;
                     })
    return e.name();  // a transition's: a string literal (expr/redistribute.hpp)
  else if constexpr (requires {
                       e.op();
                       e.args();
                     })
    return std::remove_cvref_t<decltype(e.op())>::name;
  else if constexpr (requires {
                       e.lhs();
                       e.rhs();
                     })
    return "matmul";
  else
    return "eval";
}
}  // namespace detail

/// @brief A rank's local part of a global tensor of element type T, with the
/// layout L in the type, on `Device` (Host, or Cuda in the GPU backend).
///
/// A shared handle: copies share the storage, `clone()` copies the data.
/// Collective factories (zeros, full, from_local, ...) check on every rank
/// that the ranks agree on the shape and lengths, and throw the same
/// `invalid_argument` on every rank if they do not.
template <Element T, LayoutTag L, class Device>
class Tensor {
  static_assert(!(TokenId<T> && std::same_as<L, Partial>), SHARDEX_ERR_TOKEN_IDS_PARTIAL);

public:
  ///@{
  /// The element type, the layout, the device, the device's communicator and
  /// the layout mapping (the lengths of a Sharded<D> with dynamic lengths).
  using value_type = T;
  using layout_type = L;
  using device_type = Device;
  using communicator_type = typename Device::communicator;
  using mapping_type = layout_mapping<L>;
  ///@}

  /// An empty handle: no communicator, no data. Using it (in an expression,
  /// a transition, backward) throws `shardex::error`; assign it a tensor first.
  Tensor() = default;
  ///@{
  /// Copies share the storage (and the autodiff node): a handle, not the data.
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  ///@}
  /// A moved-from tensor is empty (as if default-constructed), never a
  /// handle to storage it no longer holds.
  Tensor(Tensor&& o) noexcept
      : comm_(std::move(o.comm_)),
        global_(o.global_),
        local_(o.local_),
        mapping_(std::move(o.mapping_)),
        storage_(std::move(o.storage_)),
        data_(std::exchange(o.data_, nullptr)),
        node_(std::move(o.node_)),
        valid_(std::exchange(o.valid_, false)) {
    o.global_ = o.local_ = Shape{};
  }
  /// Takes o's handle; o is left empty.
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      comm_ = std::move(o.comm_);
      global_ = std::exchange(o.global_, Shape{});
      local_ = std::exchange(o.local_, Shape{});
      mapping_ = std::move(o.mapping_);
      storage_ = std::move(o.storage_);
      data_ = std::exchange(o.data_, nullptr);
      node_ = std::move(o.node_);
      valid_ = std::exchange(o.valid_, false);
    }
    return *this;
  }
  ~Tensor() = default;

  /// Evaluates a lazy expression (expr/): `Tensor<float, Replicated> y = all_gather(x);`
  /// runs the simplified plan of the expression here.
  template <class E>
  requires(
      !std::same_as<std::remove_cvref_t<E>, Tensor> && requires { typename E::layout_type; } &&
      requires(const E& e) { evaluate(e); }) Tensor(const E& e)
      : Tensor(evaluate_as_this(e)) {}  // NOLINT(google-explicit-constructor): expressions convert like Eigen's

  /// Zeros: every rank allocates its part of a tensor of global shape `global`.
  /// Collective like the transitions: the ranks agree that the shape and
  /// lengths are valid and the same everywhere, so a bad one throws on every
  /// rank (at CheckLevel::communicating; alone at CheckLevel::local).
  static Tensor zeros(const communicator_type& comm, const Shape& global, mapping_type m = {}) {
    return agreed_allocation(comm, global, std::move(m), "shardex::Tensor::zeros", false);
  }

  /// Internal: zeros for a result whose shape and lengths come from tensors
  /// already checked (no cross-rank agreement).
  static Tensor zeroed(const communicator_type& comm, const Shape& global, mapping_type m = {}) {
    Tensor t(comm, global, std::move(m), "shardex::Tensor::zeros");
    t.storage_ = t.allocate_local("shardex::Tensor::zeros", false);
    t.data_ = t.storage_.get();
    return t;
  }

  /// Uninitialized local storage (like torch.empty), from the device's memory
  /// pool: for results that are written whole before anyone reads them.
  static Tensor empty(const communicator_type& comm, const Shape& global, mapping_type m = {}) {
    Tensor t(comm, global, std::move(m), "shardex::Tensor::empty");
    t.storage_ = t.allocate_local("shardex::Tensor::empty", true);
    t.data_ = t.storage_.get();
    return t;
  }

  /// `value` everywhere; collective like zeros().
  static Tensor full(const communicator_type& comm, const Shape& global, T value, mapping_type m = {}) {
    Tensor t = agreed_allocation(comm, global, std::move(m), "shardex::Tensor::full", true);
    Device::fill(t.data(), t.size(), value);
    return t;
  }

  /// Ones everywhere; collective like zeros().
  static Tensor ones(const communicator_type& comm, const Shape& global, mapping_type m = {}) {
    return full(comm, global, T(1), std::move(m));
  }

  /// The factories with a compile-time shape check the layout at compile time.
  template <std::int64_t... E>
  static Tensor zeros(const communicator_type& comm, static_shape<E...> s, mapping_type m = {}) {
    static_check(s);
    return zeros(comm, Shape(s), std::move(m));
  }
  /// ones() with the compile-time checks of zeros(static_shape).
  template <std::int64_t... E>
  static Tensor ones(const communicator_type& comm, static_shape<E...> s, mapping_type m = {}) {
    static_check(s);
    return ones(comm, Shape(s), std::move(m));
  }
  /// full() with the compile-time checks of zeros(static_shape).
  template <std::int64_t... E>
  static Tensor full(const communicator_type& comm, static_shape<E...> s, T value, mapping_type m = {}) {
    static_check(s);
    return full(comm, Shape(s), value, std::move(m));
  }

  /// Each rank fills its part with f(global_index), `global_index` a
  /// std::span<const int64_t> of the element's index in the global tensor.
  /// Unsharded layouts (I, R, P) fill the whole tensor on every rank.
  template <class F>
  requires std::same_as<Device, Host> && std::invocable<F&, std::span<const std::int64_t>>
  static Tensor from_function(const communicator_type& comm, const Shape& global, F&& f, mapping_type m = {}) {
    Tensor t = zeros(comm, global, std::move(m));
    const std::int64_t base = t.global_offset();
    std::vector<std::int64_t> idx(static_cast<std::size_t>(global.rank()), 0);
    const Shape& ls = t.local_;
    for (std::int64_t i = 0; i < ls.numel(); ++i) {
      std::int64_t rem = i;
      for (int d = ls.rank() - 1; d >= 0; --d) {
        idx[static_cast<std::size_t>(d)] = rem % ls[d];
        rem /= ls[d];
      }
      if constexpr (is_sharded_v<L>) idx[static_cast<std::size_t>(L::dim)] += base;
      t.data_[i] = static_cast<T>(f(std::span<const std::int64_t>(idx)));
    }
    return t;
  }

  /// Uniform numbers in [lo, hi), a function of (seed, global index) only:
  /// every rank gets its part of one global random tensor, whatever the layout
  /// and the lengths (unsharded layouts get the whole tensor on every rank).
  /// For token ids, uniform integers in [lo, hi) (random tokens of a vocabulary).
  static Tensor uniform(const communicator_type& comm, const Shape& global, std::uint64_t seed, T lo = T(-1),
                        T hi = T(1), mapping_type m = {}) requires std::same_as<Device, Host> {
    // An empty range of token ids has no value to draw: refuse it (the same
    // arguments on every rank, so every rank throws) rather than return lo.
    if constexpr (TokenId<T>)
      if (hi <= lo && global.numel() > 0)
        throw invalid_argument("shardex::Tensor::uniform: token ids in [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + ") is an empty range for " + std::to_string(global.numel()) +
                               " elements; give hi > lo (hi: the vocabulary's size)");
    return from_function(
        comm, global,
        [&](std::span<const std::int64_t> idx) {
          const double u = unit_random(seed, linear_index(global, idx));
          if constexpr (TokenId<T>)
            return static_cast<T>(static_cast<double>(lo) + std::floor(static_cast<double>(hi - lo) * u));
          else
            return lo + (hi - lo) * static_cast<T>(u);
        },
        std::move(m));
  }

  /// Normal numbers N(mean, stddev^2), by the same rule as `uniform`.
  static Tensor normal(const communicator_type& comm, const Shape& global, std::uint64_t seed, T mean = T(0),
                       T stddev = T(1), mapping_type m = {}) requires std::same_as<Device, Host> {
    static_assert(Scalar<T>, SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY);
    return from_function(
        comm, global, [&](std::span<const std::int64_t> idx) { return normal_at(seed, global, idx, mean, stddev); },
        std::move(m));
  }

  /// The element of `normal(comm, global, seed, mean, stddev)` at a global
  /// index: a function of (seed, global shape, index) alone (Box-Muller over
  /// two counter-based uniforms), so a mesh tensor draws the same numbers.
  static T normal_at(std::uint64_t seed, const Shape& global, std::span<const std::int64_t> idx, T mean, T stddev) {
    const std::uint64_t k = 2 * static_cast<std::uint64_t>(linear_index(global, idx));
    const double u1 = 1.0 - unit_random(seed, static_cast<std::int64_t>(k));  // (0, 1]
    const double u2 = unit_random(seed, static_cast<std::int64_t>(k + 1));
    return mean + stddev * static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  /// From each rank's local part in host memory, copied (to the device's memory). Collective: all ranks call it, and
  /// all throw the same error if any rank's part does not fit (its extent along
  /// the sharded dim is not lengths[rank], the data size is not the shape's).
  static Tensor from_local(const communicator_type& comm, const Shape& local_shape, std::span<const T> local,
                           mapping_type m = {}) {
    // The checks of view_local, on a host pointer that is only looked at, then one upload.
    const Tensor v = view_local(comm, local_shape, const_cast<T*>(local.data()), local.size(), std::move(m));
    Tensor t = empty(comm, v.shape(), v.mapping());
    Device::upload(t.data(), local.data(), t.size());
    return t;
  }

  /// A view of each rank's local part in user memory of the tensor's device
  /// (not owned; it must outlive the tensor). Collective, with the checks of `from_local`.
  static Tensor view_local(const communicator_type& comm, const Shape& local_shape, T* data, std::size_t size,
                           mapping_type m = {}) {
    constexpr const char* op = "shardex::Tensor::from_local";
    Shape global = local_shape;
    std::string err;
    const std::string where = std::string(op) + " on rank " + std::to_string(comm.rank()) + " of " +
                              std::to_string(comm.size()) + " (layout " + layout_name<L>() + ", local shape " +
                              local_shape.str() + ")";
    if (const std::string bad = shape_problem(local_shape); !bad.empty()) err = where + ": " + bad;
    if constexpr (is_sharded_v<L>) {
      // The global shape is the local one with the lengths' sum along the
      // sharded dim; the mapping's own checks (count, signs, dim) are
      // mapping_problem's, and only the local extent is this function's.
      const auto ls = m.lengths();
      if (err.empty()) {
        if (L::dim < local_shape.rank()) {
          std::int64_t sum = 0;
          for (auto l : ls) sum += l;
          global = local_shape.with(L::dim, sum);
        }
        if (const std::string bad = mapping_problem<L>(m, global, comm.size()); !bad.empty())
          err = where + ": the lengths " + to_string(ls) + ": " + bad;
        else if (local_shape[L::dim] != ls[static_cast<std::size_t>(comm.rank())])
          err = where + ": the local extent along sharded dim " + std::to_string(L::dim) + " is " +
                std::to_string(local_shape[L::dim]) + " but lengths[" + std::to_string(comm.rank()) + "] is " +
                std::to_string(ls[static_cast<std::size_t>(comm.rank())]) + " (lengths " + to_string(ls) + ")";
      }
    }
    if (err.empty() && static_cast<std::int64_t>(size) != local_shape.numel())
      err = where + ": " + std::to_string(size) + " elements given for a local shape of " +
            std::to_string(local_shape.numel());
    detail::Signature sig;
    sig.add(op).add(dtype_name<T>()).add(layout_name<L>());
    std::string call = where + " with global shape " + global.str();
    if (err.empty()) {
      for (auto e : global.extents()) sig.add(e);
      // The lengths too: lists that differ across ranks can fit every rank's
      // own extent and sum to the same global extent.
      if constexpr (is_sharded_v<L>) {
        for (auto l : m.lengths()) sig.add(l);
        call += " and lengths " + to_string(m.lengths());
      }
    }
    detail::agree(comm, err, sig, call);
    Tensor t(comm, global, std::move(m), op);
    t.data_ = data;
    return t;
  }

  // ---- observers ---------------------------------------------------------
  /// False for a default-constructed or moved-from tensor (an empty handle).
  [[nodiscard]] bool valid() const noexcept { return valid_; }
  /// Throws `shardex::error` naming `op` if this is an empty handle.
  void require_valid(const char* op) const {
    if (!valid_)
      throw error(std::string(op) + ": the tensor is empty (default-constructed or moved-from) and holds no data; " +
                  "assign it a tensor (Tensor::zeros, from_local, an expression) before using it");
  }
  /// The global shape (the same on every rank).
  [[nodiscard]] const Shape& shape() const noexcept { return global_; }
  /// The shape of this rank's part: the global one, with lengths[rank] along a
  /// sharded dim.
  [[nodiscard]] const Shape& local_shape() const noexcept { return local_; }
  /// The run-time part of the layout (the lengths of a dynamic Sharded).
  [[nodiscard]] const mapping_type& mapping() const noexcept { return mapping_; }
  /// The communicator the tensor is spread over.
  [[nodiscard]] const communicator_type& comm() const noexcept { return comm_; }
  ///@{
  /// This rank and the number of ranks, of comm().
  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int world_size() const noexcept { return comm_.size(); }
  ///@}
  /// The local elements, row-major, in the device's memory.
  [[nodiscard]] T* data() const noexcept { return data_; }
  /// Number of local elements.
  [[nodiscard]] std::int64_t size() const noexcept { return local_.numel(); }
  /// The local elements as a span (device memory for a device tensor).
  [[nodiscard]] std::span<T> local() const noexcept { return {data_, static_cast<std::size_t>(size())}; }
  /// Whether the data is user memory (view_local) rather than owned storage.
  [[nodiscard]] bool is_view() const noexcept { return storage_ == nullptr && data_ != nullptr; }
  /// Whether this handle is the only owner of its storage (no copy, view or
  /// reinterpreted tensor shares it), so that writing it in place is unseen.
  [[nodiscard]] bool owns_storage_alone() const noexcept { return storage_ != nullptr && storage_.use_count() == 1; }

  /// The lengths of a sharded layout (one per rank).
  [[nodiscard]] std::span<const std::int64_t> lengths() const noexcept requires is_sharded_v<L> {
    return mapping_.lengths();
  }

  /// Where this rank's slice starts along the sharded dim (0 for unsharded layouts).
  [[nodiscard]] std::int64_t global_offset() const noexcept {
    if constexpr (is_sharded_v<L>) {
      std::int64_t o = 0;
      for (int r = 0; r < comm_.rank(); ++r) o += mapping_.lengths()[static_cast<std::size_t>(r)];
      return o;
    } else {
      return 0;
    }
  }

  /// Element at a local multi-index (host only); `x()` for a 0-d tensor.
  template <std::integral... I>
  requires std::same_as<Device, Host>
  [[nodiscard]] T& operator()(I... idx) const {
    const std::array<std::int64_t, sizeof...(I)> ix{static_cast<std::int64_t>(idx)...};
    if (static_cast<int>(sizeof...(I)) != local_.rank())
      throw invalid_argument("shardex::Tensor::operator(): " + std::to_string(sizeof...(I)) + " indices for a " +
                             std::to_string(local_.rank()) + "-d local shape " + local_.str());
    std::int64_t off = 0;
    for (int d = 0; d < local_.rank(); ++d) off = off * local_[d] + ix[static_cast<std::size_t>(d)];
    return data_[off];
  }

  /// The local elements as a flat Eigen array (host only): an
  /// `Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>`, defined in
  /// <shardex/tensor/eigen_array.hpp> (which <shardex.hpp> includes), so that
  /// only a translation unit that asks for Eigen parses it.
  [[nodiscard]] auto array() const requires std::same_as<Device, Host>;

  /// A deep copy (owning), same layout and communicator.
  [[nodiscard]] Tensor clone() const {
    Tensor t = *this;
    t.storage_ = Device::template allocate_uninitialized<T>(size());
    t.data_ = t.storage_.get();
    copy_elements<Device>(data_, t.data_, size());
    return t;
  }

  /// Reinterpret the same local data under another layout with the same
  /// mapping type (used by transitions whose local data does not change).
  template <LayoutTag L2>
  [[nodiscard]] Tensor<T, L2, Device> reinterpret_as(layout_mapping<L2> m = {}) const {
    return Tensor<T, L2, Device>::adopt(comm_, global_, std::move(m), storage_, data_);
  }

  /// The same local elements, in the same row-major order, under layout L2,
  /// global shape `global` and mapping `m`: a view sharing this tensor's
  /// storage (no copy; as with torch's view, writing one writes the other).
  /// The local element counts must be the same.
  template <LayoutTag L2>
  [[nodiscard]] Tensor<T, L2, Device> viewed_as(const Shape& global, layout_mapping<L2> m) const {
    auto t = Tensor<T, L2, Device>::adopt(comm_, global, std::move(m), storage_, data_);
    if (t.local_shape().numel() != local_.numel())
      throw error("shardex::Tensor::viewed_as on rank " + std::to_string(comm_.rank()) + ": the local shape " +
                  local_.str() + " has not the element count of the local shape " + t.local_shape().str() + " of " +
                  t.describe());
    return t;
  }

  /// The same local data seen from another communicator of a mesh: the
  /// layout, global shape and lengths that tensor has along another axis
  /// (mesh/mesh_tensor.hpp). The local shapes must be the same.
  template <LayoutTag L2, class Comm2>
  [[nodiscard]] Tensor<T, L2, Device> reseat(const Comm2& comm, const Shape& global, layout_mapping<L2> m) const {
    auto t = Tensor<T, L2, Device>::adopt(comm, global, std::move(m), storage_, data_);
    if (t.local_shape() != local_)
      throw error("shardex::Tensor::reseat on rank " + std::to_string(comm_.rank()) + ": the local shape " +
                  local_.str() + " is not the local shape " + t.local_shape().str() + " of " + t.describe());
    return t;
  }

  // ---- autodiff -----------------------------------------------------------
  /// The gradient's type: the same tensor in the dual layout (dual_t<L>).
  using grad_type = Tensor<T, dual_t<L>, Device>;
  /// The autodiff graph node of a differentiable tensor.
  using node_type = autodiff::TensorNode<T, L, Device>;

  /// Marks this tensor as a leaf of the graph (a parameter) and returns it:
  /// `backward(loss)` will fill `grad()`, in the dual layout.
  Tensor& requires_grad() {
    static_assert(Scalar<T>, SHARDEX_ERR_TOKEN_IDS_NO_GRADIENT);
    if (!node_) node_ = make_node("leaf");
    return *this;
  }
  /// Whether the tensor is in the autodiff graph (a leaf or the result of one).
  [[nodiscard]] bool is_differentiable() const noexcept { return node_ != nullptr; }
  /// Whether backward() has given it a gradient (since the last zero_grad()).
  [[nodiscard]] bool has_grad() const noexcept { return node_ && node_->grad.has_value(); }
  /// The gradient, layout dual(L). Throws if backward has not reached this tensor.
  [[nodiscard]] const grad_type& grad() const {
    if (!has_grad())
      throw error("shardex::Tensor::grad(): " + describe() +
                  (node_ ? " has no gradient yet; call backward(loss) on a loss that depends on it"
                         : " is not differentiable; call requires_grad() on it first"));
    return *node_->grad;
  }
  /// Forgets the gradient (the next backward starts from zero).
  void zero_grad() const {
    if (!node_) return;
    node_->grad.reset();
    node_->zeroed.reset();  // kept storage too: the memory is the caller's again
  }
  /// Calls `f(grad())` each time backward() has completed this parameter's
  /// gradient: right after the last adjoint that adds to it, while it is
  /// likely still in cache (a weight's, after the product that made it).
  /// One hook a parameter; an empty `f` removes it. `f` must not hold this
  /// tensor (the hook lives in its node). Not called for a parameter that is
  /// the pass's root; hooks completing at the same node run in the order of
  /// its inputs, the same on every rank.
  /// @throws error unless the tensor is a parameter (requires_grad()).
  void on_grad_complete(std::function<void(const grad_type&)> f) const {
    if (!node_ || !node_->is_leaf())
      throw error("shardex::Tensor::on_grad_complete(): " + describe() +
                  " is not a parameter; call requires_grad() on it first");
    if (!f) {
      node_->grad_complete = nullptr;
      return;
    }
    node_->grad_complete = [n = node_.get(), f = std::move(f)] { f(*n->grad); };
  }
  /// Whether grad()'s storage is this parameter's alone (no copy of grad()
  /// is held elsewhere): then an optimizer's pass may leave zeros in it as
  /// it reads it, and hand it back with zero_grad_keeping_storage().
  [[nodiscard]] bool grad_storage_alone() const noexcept {
    return has_grad() && node_->is_leaf() && node_->grad->owns_storage_alone();
  }
  /// zero_grad() for a parameter whose gradient an optimizer's pass has just
  /// overwritten with zeros (AdamStep::clear_grad), and only then: the
  /// storage is kept as it is (not zeroed here), and
  /// the next backward adds its first contribution into it, a weight
  /// gradient's product with beta 1, instead of taking fresh storage that
  /// the BLAS zeroes in a pass of its own (bench/RESULTS.md, "The weight
  /// gradients' zeroing").
  /// @throws error unless grad_storage_alone().
  void zero_grad_keeping_storage() const {
    if (!grad_storage_alone())
      throw error(
          "shardex::Tensor::zero_grad_keeping_storage(): " + describe() +
          (has_grad() ? " has a gradient whose storage is shared with another tensor" : " has no gradient to keep"));
    node_->zeroed = std::move(node_->grad);
    node_->grad.reset();
  }
  /// The same data, outside the graph.
  [[nodiscard]] Tensor detach() const {
    Tensor t = *this;
    t.node_.reset();
    return t;
  }
  /// The graph node; null outside the graph.
  [[nodiscard]] const std::shared_ptr<node_type>& node() const noexcept { return node_; }

  /// Internal: records `op` as the maker of this tensor, with `inputs` and the
  /// rule that turns this tensor's gradient into theirs.
  Tensor& record(const char* op, std::vector<std::shared_ptr<autodiff::Node>> inputs,
                 std::function<void(const grad_type&)> backward) {
    node_ = make_node(op);
    node_->inputs = std::move(inputs);
    node_->backward = std::move(backward);
    return *this;
  }

  /// Internal: a tensor over existing storage (used by transitions and reinterpret_as).
  static Tensor adopt(const communicator_type& comm, const Shape& global, mapping_type m, std::shared_ptr<T[]> storage,
                      T* data) {
    Tensor t(comm, global, std::move(m), "shardex::Tensor");
    t.storage_ = std::move(storage);
    t.data_ = data;
    return t;
  }

  /// "Tensor<float32, S(1)[1,2,3,4]> global (5, 10), local (5, 2) on rank 1 of 4"
  [[nodiscard]] std::string describe() const {
    return std::string("Tensor<") + dtype_name<T>() + ", " + layout_name<L>() + "> global " + global_.str() +
           ", local " + local_.str() + " on rank " + std::to_string(comm_.rank()) + " of " +
           std::to_string(comm_.size());
  }

private:
  template <std::int64_t... E>
  static constexpr void static_check(static_shape<E...>) {
    if constexpr (is_sharded_v<L>) {
      static_assert(L::dim < static_shape<E...>::rank, SHARDEX_ERR_TENSOR_NO_SHARDED_DIM);
      if constexpr (L::dim < static_shape<E...>::rank && L::has_static_lengths)
        static_assert(L::lengths_type::sum == static_shape<E...>::values[L::dim],
                      SHARDEX_ERR_TENSOR_STATIC_LENGTHS_SUM);
    }
  }

  static std::int64_t linear_index(const Shape& g, std::span<const std::int64_t> idx) {
    std::int64_t k = 0;
    for (int d = 0; d < g.rank(); ++d) k = k * g[d] + idx[static_cast<std::size_t>(d)];
    return k;
  }
  /// A number in [0, 1) from (seed, k): splitmix64, a counter-based generator.
  static double unit_random(std::uint64_t seed, std::int64_t k) {
    std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(k) + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }

  template <class E>
  static Tensor evaluate_as_this(const E& e) {
    static_assert(std::same_as<typename E::layout_type, L>, SHARDEX_ERR_TENSOR_EXPR_LAYOUT);
    static_assert(std::same_as<typename E::value_type, T>, SHARDEX_ERR_TENSOR_EXPR_TYPE);
    if constexpr (std::same_as<typename E::layout_type, L> && std::same_as<typename E::value_type, T>) {
      // The expression's local math (its transitions are spans of their own).
      trace::Span span("eval", detail::eval_span_name(e));
      Tensor out = evaluate(e);
      if (span.on()) span.set_args(trace::json_string_member("result", out.describe()));
      return out;
    } else {
      return {};
    }
  }

  Tensor(const communicator_type& comm, const Shape& global, mapping_type m, const char* op)
      : comm_(comm), global_(global), mapping_(std::move(m)), valid_(true) {
    if (const std::string err = shape_problem(global_); !err.empty())
      throw invalid_argument(std::string(op) + " on rank " + std::to_string(comm_.rank()) + " of " +
                             std::to_string(comm_.size()) + ": global shape " + global_.str() + ": " + err);
    if constexpr (is_sharded_v<L>) check_mapping<L>(mapping_, global_, comm_.size(), comm_.rank(), op);
    local_ = shardex::local_shape<L>(global_, mapping_, comm_.rank());
  }

  /// The most elements the backend's calls can carry (MPI: ints).
  static constexpr std::int64_t max_count() {
    if constexpr (requires { communicator_type::max_count; })
      return communicator_type::max_count;
    else
      return INT64_MAX;
  }

  /// The factories' storage, allocated between the local checks and the
  /// cross-rank agreement (agree.hpp): a shape or lengths problem, a local part
  /// too large for the backend's counts (refused before allocating) or an
  /// allocation that fails, on any rank, and shapes or lengths that differ
  /// across ranks, throw on every rank. Skipped inside backward (its pass agreed once).
  static Tensor agreed_allocation(const communicator_type& comm, const Shape& global, mapping_type m, const char* op,
                                  bool uninitialized) {
    std::string err = shape_problem(global);
    if constexpr (is_sharded_v<L>)
      if (err.empty()) err = mapping_problem<L>(m, global, comm.size());
    Tensor t;
    if (err.empty()) {
      const Shape local = shardex::local_shape<L>(global, m, comm.rank());
      if (local.numel() > max_count())
        err = "its local part " + local.str() + " holds " + std::to_string(local.numel()) +
              " elements, more than one call of the backend can move (" + std::to_string(max_count()) +
              " for MPI's int counts); shard it over more ranks, split it, or use the NCCL backend";
    }
    if (err.empty()) {
      t = Tensor(comm, global, m, op);
      const std::int64_t n = t.local_.numel();
      try {
        t.storage_ = uninitialized ? Device::template allocate_uninitialized<T>(n) : Device::template allocate<T>(n);
        t.data_ = t.storage_.get();
      } catch (const std::exception& e) {  // std::bad_alloc, or the device's out-of-memory error
        err = "cannot allocate its local part " + t.local_.str() + " (" + std::to_string(n) + " elements, " +
              std::to_string(n * std::int64_t(sizeof(T))) + " bytes): " + e.what();
        t = Tensor();
      }
    }
    agree_on_factory(comm, global, m, op, std::move(err));
    return t;
  }

  /// The factories' cross-rank check (agree.hpp): a problem found on any rank
  /// (`err`, from agreed_allocation's checks), or shapes and lengths that
  /// differ across ranks, throw on every rank. Skipped inside backward.
  static void agree_on_factory(const communicator_type& comm, const Shape& global, const mapping_type& m,
                               const char* op, std::string err) {
    const auto call = [&] {
      return std::string(op) + " on rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
             " (layout " + layout_name<L>() + ", global shape " + global.str() + ")";
    };
    if (!err.empty()) err = call() + ": " + err;
    detail::Signature sig;
    sig.add(op).add(dtype_name<T>()).add(layout_name<L>());
    for (auto e : global.extents()) sig.add(e);
    if constexpr (is_sharded_v<L>)
      if (err.empty())
        for (auto l : m.lengths()) sig.add(l);
    detail::agree(comm, err, sig, call);
  }

  /// The local storage, its allocation failure reported with the call, the
  /// rank and the size (a std::bad_alloc alone names none of them).
  std::shared_ptr<T[]> allocate_local(const char* op, bool uninitialized) const {
    const std::int64_t n = local_.numel();
    try {
      return uninitialized ? Device::template allocate_uninitialized<T>(n) : Device::template allocate<T>(n);
    } catch (const std::bad_alloc&) {
      throw error(std::string(op) + " on rank " + std::to_string(comm_.rank()) + " of " + std::to_string(comm_.size()) +
                  ": cannot allocate " + std::to_string(n) + " elements (" +
                  std::to_string(n * std::int64_t(sizeof(T))) + " bytes) for the local shape " + local_.str() +
                  " of global shape " + global_.str());
    }
  }

  communicator_type comm_;
  Shape global_;
  Shape local_;
  [[no_unique_address]] mapping_type mapping_;

  std::shared_ptr<node_type> make_node(const char* op) const {
    auto n = std::make_shared<node_type>();
    n->op = op;
    n->make_full = [comm = comm_, global = global_, m = dual_mapping<L>(mapping_)](T v) {
      return grad_type::full(comm, global, v, m);
    };
    n->make_empty = [comm = comm_, global = global_, m = dual_mapping<L>(mapping_)] {
      return grad_type::empty(comm, global, m);
    };
    return n;
  }

  std::shared_ptr<T[]> storage_;
  T* data_ = nullptr;
  std::shared_ptr<node_type> node_;
  bool valid_ = false;  // made by a factory, a view or an expression; false when default-constructed or moved from
};

}  // namespace shardex
