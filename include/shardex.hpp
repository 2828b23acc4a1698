// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The whole of shardex: layouts in the type, lazy transitions planned
/// and lowered to collectives, local math with layout rules, and adjoints
/// derived from the layout algebra.

// One clear error below C++20 (concepts, std::span), and none of the
// thousand that would follow: the missing header after it ends the compilation.
#if !defined(__cplusplus) || __cplusplus < 202002L
#error \
    "shardex needs C++20: compile with -std=c++20 (Meson: default_options: ['cpp_std=c++20']; CMake: cxx_std_20, which shardex::shardex carries)"
#include <shardex/stop_here_the_compiler_is_below_cxx20>
#endif

#include "shardex/config.hpp"  // IWYU pragma: export (SHARDEX_WITH_MPI: the build's backends)

#include "shardex/autodiff/backward.hpp"         // IWYU pragma: export
#include "shardex/autodiff/grad_norm.hpp"        // IWYU pragma: export
#include "shardex/autodiff/sgd.hpp"              // IWYU pragma: export
#include "shardex/backend/mpi/communicator.hpp"  // IWYU pragma: export
#include "shardex/backend/mpi/environment.hpp"   // IWYU pragma: export
#include "shardex/backend/mpi/print.hpp"         // IWYU pragma: export
#include "shardex/core/backend_calls.hpp"        // IWYU pragma: export
#include "shardex/core/checks.hpp"               // IWYU pragma: export
#include "shardex/core/error.hpp"                // IWYU pragma: export
#include "shardex/core/shape.hpp"                // IWYU pragma: export
#include "shardex/device/host/gemm_tuning.hpp"   // IWYU pragma: export
#include "shardex/eager/eager.hpp"               // IWYU pragma: export
#include "shardex/expr/attention.hpp"            // IWYU pragma: export
#include "shardex/expr/elementwise.hpp"          // IWYU pragma: export
#include "shardex/expr/explain.hpp"              // IWYU pragma: export
#include "shardex/expr/expression.hpp"           // IWYU pragma: export
#include "shardex/expr/matmul.hpp"               // IWYU pragma: export
#include "shardex/expr/redistribute.hpp"         // IWYU pragma: export
#include "shardex/expr/reshape.hpp"              // IWYU pragma: export
#include "shardex/expr/sum.hpp"                  // IWYU pragma: export
#include "shardex/expr/transpose.hpp"            // IWYU pragma: export
#include "shardex/layout/layouts.hpp"            // IWYU pragma: export
#include "shardex/layout/lengths.hpp"            // IWYU pragma: export
#include "shardex/layout/mapping.hpp"            // IWYU pragma: export
#include "shardex/lower/strategy.hpp"            // IWYU pragma: export
#include "shardex/nn/causal_attention.hpp"       // IWYU pragma: export
#include "shardex/nn/cross_entropy.hpp"          // IWYU pragma: export
#include "shardex/nn/embedding.hpp"              // IWYU pragma: export
#include "shardex/nn/heads.hpp"                  // IWYU pragma: export
#include "shardex/nn/norm.hpp"                   // IWYU pragma: export
#include "shardex/tensor/eigen_array.hpp"        // IWYU pragma: export
#include "shardex/tensor/format.hpp"             // IWYU pragma: export
#include "shardex/tensor/tensor.hpp"             // IWYU pragma: export
#include "shardex/tensor/transfer.hpp"           // IWYU pragma: export
#include "shardex/transition/table.hpp"          // IWYU pragma: export
