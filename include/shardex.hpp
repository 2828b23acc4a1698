#pragma once
/// @file
/// @brief The whole of shardex: layouts in the type, transitions lowered to
/// collectives, adjoints derived from the layout algebra.

#include "shardex/backend/mpi/communicator.hpp"   // IWYU pragma: export
#include "shardex/backend/mpi/environment.hpp"    // IWYU pragma: export
#include "shardex/backend/mpi/print.hpp"          // IWYU pragma: export
#include "shardex/device/format.hpp"              // IWYU pragma: export
#include "shardex/core/checks.hpp"                // IWYU pragma: export
#include "shardex/core/error.hpp"                 // IWYU pragma: export
#include "shardex/core/shape.hpp"                 // IWYU pragma: export
#include "shardex/device/tensor.hpp"              // IWYU pragma: export
#include "shardex/layout/layouts.hpp"             // IWYU pragma: export
#include "shardex/layout/lengths.hpp"             // IWYU pragma: export
#include "shardex/layout/mapping.hpp"             // IWYU pragma: export
#include "shardex/lower/strategy.hpp"             // IWYU pragma: export
#include "shardex/ops/collectives.hpp"            // IWYU pragma: export
#include "shardex/ops/scale.hpp"                  // IWYU pragma: export
#include "shardex/ops/sum.hpp"                    // IWYU pragma: export
#include "shardex/transition/table.hpp"           // IWYU pragma: export
