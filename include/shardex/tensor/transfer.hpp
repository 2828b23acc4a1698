// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `to<Device>(x, comm)`: the same global tensor on another device,
/// each rank copying its own local part (no communication). Differentiable:
/// the gradient comes back to `x` on its own device.
///
/// @code
/// auto nccl = nccl::Communicator::create(world);
/// auto w = to<Cuda>(Tensor<float, Sharded<1>>::normal(world, {512, 2048}, seed), nccl);
/// auto back = to<Host>(w);   // on the host again, with nccl.control() as communicator
/// @endcode

#include <string>
#include <vector>

#include "shardex/core/error.hpp"
#include "shardex/tensor/tensor.hpp"
#include "shardex/core/agree.hpp"

namespace shardex {

/// The same global tensor on device To, over `comm` (To's communicator, with
/// the same rank and size as x's): each rank copies its local part.
/// @throws invalid_argument if comm's rank or size is not x's.
template <class To, Element T, LayoutTag L, class From>
Tensor<T, L, To> to(const Tensor<T, L, From>& x, const typename To::communicator& comm) {
  if (comm.rank() != x.rank() || comm.size() != x.world_size())
    throw invalid_argument(std::string("shardex::to<") + To::name + ">(x, comm): x is " + x.describe() +
                           " but the communicator is rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.size()) + "; it must have the same ranks");
  auto out = Tensor<T, L, To>::zeroed(comm, x.shape(), x.mapping());
  if constexpr (std::same_as<From, Host>) {
    To::upload(out.data(), x.data(), x.size());
  } else if constexpr (std::same_as<To, Host>) {
    From::download(out.data(), x.data(), x.size());
  } else {  // between two devices: through the host
    std::vector<T> stage(static_cast<std::size_t>(x.size()));
    From::download(stage.data(), x.data(), x.size());
    To::upload(out.data(), stage.data(), x.size());
  }
  if constexpr (Scalar<T>)  // token ids have no gradient
    if (x.node())
      out.record("to", {x.node()},
                 [x](const Tensor<T, dual_t<L>, To>& g) { x.node()->accumulate(to<From>(g, x.comm())); });
  return out;
}

/// To the host, with the host communicator of x's backend (for NCCL, the MPI
/// communicator it was bootstrapped from).
template <class To, Element T, LayoutTag L, class From>
requires std::same_as<To, Host> Tensor<T, L, Host> to(const Tensor<T, L, From>& x) {
  return to<Host>(x, detail::control_of(x.comm()));
}

}  // namespace shardex
