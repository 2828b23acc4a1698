// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `DeviceMesh<Device, Axes...>` (`Mesh<Axes...>` on the host): a
/// Cartesian grid of the ranks of a communicator, one typed axis per
/// dimension, each with its own sub-communicator.
///
/// Rank r of the world sits at coordinates (c_0, ..., c_{n-1}) in row-major
/// order: the last axis varies fastest, so the ranks of one last-axis group
/// are consecutive (put tensor parallelism last to keep it on a node, as
/// Megatron does). The sub-communicator of axis k holds the ranks that share
/// every other coordinate, in the order of c_k. On the host it is an MPI
/// communicator split from the world (MPI_Comm_split); on a GPU an NCCL
/// communicator made over that split.
///
/// A copy of a mesh shares its communicators; two tensors may meet only if
/// they live on the same mesh (checked at run time; different mesh types are
/// a compile error).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/mesh/axis.hpp"

namespace shardex {

struct Host;

namespace detail {

template <class A, class... As>
constexpr std::size_t index_of_axis() {
  constexpr std::array<bool, sizeof...(As)> same{std::same_as<A, As>...};
  std::size_t i = 0;
  while (i < same.size() && !same[i]) ++i;
  return i;
}

template <class F>
struct create_options;
template <class R, class A, class O>
struct create_options<R (*)(A, O)> {
  using type = O;
};

/// The device's communicator over an MPI communicator: itself on the host,
/// a communicator the backend creates over it otherwise (NCCL), on the GPU
/// `device` (the same for every axis of a rank: the rank's place on its node
/// in the whole world, not in the sub-communicator, which would give one rank
/// a different GPU per axis).
template <class Comm>
Comm device_communicator(const mpi::Communicator& c, int device) {
  if constexpr (std::same_as<Comm, mpi::Communicator>) {
    (void)device;
    return c;
  } else {
    typename create_options<decltype(&Comm::create)>::type options;
    options.device = device;
    return Comm::create(c, options);
  }
}

}  // namespace detail

/// @brief A grid of the ranks of a communicator with one typed axis per
/// dimension, each with its sub-communicator on `Device` (see the file's note).
template <class Device, MeshAxis... Axes>
class DeviceMesh {
  static_assert(sizeof...(Axes) > 0, SHARDEX_ERR_MESH_NO_AXES);

public:
  ///@{
  /// The device, its communicator type, and the number of axes.
  using device_type = Device;
  using communicator = typename Device::communicator;
  static constexpr std::size_t axis_count = sizeof...(Axes);
  ///@}

  /// Whether `A` is an axis of this mesh.
  template <class A>
  static constexpr bool has_axis = (std::same_as<A, Axes> || ...);
  /// The position of axis `A` (axis_count if the mesh lacks it).
  template <class A>
  static constexpr std::size_t index_of = detail::index_of_axis<A, Axes...>();

  /// The type of the K-th axis.
  template <std::size_t K>
  using axis_type = std::tuple_element_t<K, std::tuple<Axes...>>;
  /// The size of the k-th axis if its type fixes it, else 0.
  template <std::size_t K>
  static constexpr int static_size = std::array<int, axis_count>{Axes::size...}[K];

  DeviceMesh() = default;

  /// Collective over `world`: the axis sizes must multiply to its size and be
  /// the same on every rank; otherwise every rank throws, naming them.
  DeviceMesh(const mpi::Communicator& world, std::array<int, axis_count> sizes) : state_(std::make_shared<State>()) {
    std::string err;
    std::int64_t product = 1;
    for (std::size_t k = 0; k < axis_count; ++k) {
      if (sizes[k] < 1 && err.empty())
        err = "axis " + std::string(names()[k]) + " has size " + std::to_string(sizes[k]) +
              "; every axis needs at least one rank";
      if (err.empty() && static_sizes()[k] != 0 && sizes[k] != static_sizes()[k])
        err = "axis " + std::string(names()[k]) + " has size " + std::to_string(sizes[k]) + " but its type says " +
              std::to_string(static_sizes()[k]);
      product *= sizes[k];
    }
    if (err.empty() && product != world.size())
      err = "the axis sizes multiply to " + std::to_string(product) + " but the communicator has " +
            std::to_string(world.size()) + " ranks";
    detail::Signature sig;
    sig.add("shardex::Mesh");
    for (int s : sizes) sig.add(s);
    detail::agree(world, err.empty() ? err : describe_call(world, sizes) + ": " + err, sig,
                  [&] { return describe_call(world, sizes); });
    state_->world = world;
    state_->sizes = sizes;
    int device = -1;
    if constexpr (!std::same_as<communicator, mpi::Communicator>) {
      // One device communicator over the whole world first: whether every
      // rank has a GPU is agreed by all of them (a sub-communicator would
      // agree within its group only, and leave the other groups waiting).
      device = world.split_node_local().rank();
      state_->device_world = detail::device_communicator<communicator>(world, device);
    }
    int rest = world.rank();
    for (std::size_t k = axis_count; k-- > 0;) {
      state_->coords[k] = rest % sizes[k];
      rest /= sizes[k];
    }
    for (std::size_t k = 0; k < axis_count; ++k) {
      // The color: the world rank with this axis' coordinate set to 0.
      int color = 0;
      for (std::size_t j = 0; j < axis_count; ++j) color = color * sizes[j] + (j == k ? 0 : state_->coords[j]);
      state_->comms[k] = detail::device_communicator<communicator>(world.split(color, state_->coords[k]), device);
    }
  }

  /// False for a default-constructed mesh (an empty handle).
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  /// The communicator the mesh was made from.
  [[nodiscard]] const mpi::Communicator& world() const { return state().world; }
  /// The sub-communicator of axis `A` (of the k-th axis).
  template <MeshAxis A>
  [[nodiscard]] const communicator& comm() const {
    static_assert(has_axis<A>, SHARDEX_ERR_MESH_NO_SUCH_AXIS);
    return state().comms[index_of<A>];
  }
  ///@{
  /// The sub-communicator, the size and this rank's coordinate of the k-th
  /// axis, or of axis A.
  [[nodiscard]] const communicator& comm(std::size_t k) const { return state().comms[k]; }
  [[nodiscard]] int size(std::size_t k) const { return state().sizes[k]; }
  [[nodiscard]] int coord(std::size_t k) const { return state().coords[k]; }
  template <MeshAxis A>
  [[nodiscard]] int size() const {
    static_assert(has_axis<A>, SHARDEX_ERR_MESH_NO_SUCH_AXIS);
    return size(index_of<A>);
  }
  template <MeshAxis A>
  [[nodiscard]] int coord() const {
    static_assert(has_axis<A>, SHARDEX_ERR_MESH_NO_SUCH_AXIS);
    return coord(index_of<A>);
  }
  ///@}
  ///@{
  /// All axes at once: their sizes, this rank's coordinates, the axes' names,
  /// and the sizes their types fix (0 where a type leaves it to run time).
  [[nodiscard]] const std::array<int, axis_count>& sizes() const { return state().sizes; }
  [[nodiscard]] const std::array<int, axis_count>& coords() const { return state().coords; }
  static constexpr std::array<std::string_view, axis_count> names() { return {Axes::name...}; }
  static constexpr std::array<int, axis_count> static_sizes() { return {Axes::size...}; }
  ///@}

  /// "2 x 3 mesh (dp, tp)"; with this rank's place: "... at (1, 0)".
  [[nodiscard]] std::string str() const {
    std::string s, n, c;
    for (std::size_t k = 0; k < axis_count; ++k) {
      s += (k ? " x " : "") + std::to_string(size(k));
      n += std::string(k ? ", " : "") + std::string(names()[k]);
      c += (k ? ", " : "") + std::to_string(coord(k));
    }
    return s + " mesh (" + n + ") at (" + c + ")";
  }

  /// The same mesh (the same communicators), not merely the same shape.
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) noexcept { return a.state_ == b.state_; }

private:
  struct State {
    mpi::Communicator world;
    communicator device_world;  ///< the device's communicator over the world (a device mesh only)
    std::array<communicator, axis_count> comms;
    std::array<int, axis_count> sizes{}, coords{};
  };
  const State& state() const {
    if (!state_)
      throw error("shardex::Mesh: an empty mesh (default-constructed); make one from a communicator and axis sizes");
    return *state_;
  }
  static std::string describe_call(const mpi::Communicator& world, const std::array<int, axis_count>& sizes) {
    std::string s;
    for (std::size_t k = 0; k < axis_count; ++k)
      s += std::string(k ? " x " : "") + std::string(names()[k]) + "=" + std::to_string(sizes[k]);
    return "shardex::Mesh(" + s + ") on rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size());
  }
  std::shared_ptr<State> state_;
};

/// A mesh of host ranks (MPI).
template <MeshAxis... Axes>
using Mesh = DeviceMesh<Host, Axes...>;

namespace detail {
template <class M>
struct is_mesh : std::false_type {};
template <class D, class... As>
struct is_mesh<DeviceMesh<D, As...>> : std::true_type {};
}  // namespace detail
template <class M>
concept MeshType = detail::is_mesh<M>::value;

}  // namespace shardex
