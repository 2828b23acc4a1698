// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Batched row-major GEMM on the GPU through cuBLAS (src/cuda/blas.cpp),
/// ordered on the compute stream. Row-major C = op(A) op(B) is column-major
/// C^T = op(B)^T op(A)^T, so cuBLAS gets the operands swapped, not copied.

#include "shardex/device/device.hpp"

namespace shardex::cuda {

/// C_i = alpha op(A_i) op(B_i) + beta C_i for every batch entry (see GemmShape).
template <class T>
void gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c);

}  // namespace shardex::cuda
