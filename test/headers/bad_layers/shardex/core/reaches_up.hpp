// SPDX-License-Identifier: MIT
#pragma once
// A fixture for check_layers.py, never compiled: core/ reaching up to expr/,
// which the check must refuse (test 'layers refuse an upward include').
#include "shardex/expr/sum.hpp"
