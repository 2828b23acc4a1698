// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Meshes: data x tensor parallelism with a layout per mesh axis
/// (docs/guides/meshes.md).

#include "shardex/mesh/axis.hpp"
#include "shardex/mesh/axis_layouts.hpp"
#include "shardex/mesh/local_ops.hpp"
#include "shardex/mesh/mesh.hpp"
#include "shardex/mesh/mesh_tensor.hpp"
#include "shardex/mesh/training.hpp"
#include "shardex/mesh/transitions.hpp"
