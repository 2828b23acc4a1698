// SPDX-License-Identifier: MIT
#pragma once
// A fixture for check_layers.py, never compiled: a compile error whose text is
// written here instead of core/compile_errors.hpp, which the check must refuse
// (test 'layers refuse a static_assert text outside the catalogue').
static_assert(sizeof(int) > 0, "shardex: a text outside the catalogue");
