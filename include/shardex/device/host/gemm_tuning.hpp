// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The host GEMM kernels tuned on a program's own steps, the ranks of a
/// communicator agreeing (tune_gemm_kernels in device/host/gemm_kernels.hpp).
///
/// @code
/// // After a first step (its allocations, first touches), four more timed:
/// train_step();
/// shardex::host::tune_gemm_kernels(comm, 4, [&] { train_step(); });
/// std::cout << shardex::host::gemm_kernels_report();  // "... tuned on 4 steps of the program ..."
/// @endcode

#include <cstdint>
#include <functional>
#include <vector>

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/device/host/gemm_kernels.hpp"

namespace shardex::host {

/// tune_gemm_kernels (device/host/gemm_kernels.hpp) with every rank of `comm` agreeing: each calls it
/// with the same `steps` and runs `step` (a collective step of the model,
/// say) that many times, and all take the kernels of the times summed over
/// `comm`. A run whose ranks all step together tunes over its world.
/// @throws invalid_argument if `steps` is not even and at least 2.
inline void tune_gemm_kernels(const mpi::Communicator& comm, int steps, const std::function<void()>& step) {
  GemmAgreement agree;
  agree.rank = comm.rank();
  agree.sum = [&comm](std::vector<std::int64_t>& v) { comm.all_reduce(v.data(), static_cast<std::int64_t>(v.size())); };
  agree.broadcast = [&comm](std::vector<std::int64_t>& v) {
    comm.broadcast(v.data(), static_cast<std::int64_t>(v.size()), 0);
  };
  tune_gemm_kernels(agree, steps, step);
}

}  // namespace shardex::host
