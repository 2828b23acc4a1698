// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The GPU backend on top of the whole of shardex: the `Cuda` device
/// and `nccl::Communicator`. Include this instead of <shardex.hpp> and link
/// `dependency('shardex-cuda')` (built when nvcc, cuBLAS and NCCL are found).

#include "shardex.hpp"                            // IWYU pragma: export
#include "shardex/backend/nccl/communicator.hpp"  // IWYU pragma: export
#include "shardex/device/cuda/cuda.hpp"           // IWYU pragma: export
#include "shardex/device/cuda/runtime.hpp"        // IWYU pragma: export
