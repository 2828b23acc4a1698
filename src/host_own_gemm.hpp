// SPDX-License-Identifier: MIT
#pragma once
// shardex's own float GEMM kernel (src/host_own_gemm.cpp), the third host
// kernel of include/shardex/device/host/gemm_kernels.hpp: private to the
// library's sources.

#include "shardex/device/device.hpp"

namespace shardex::host::detail {

/// Whether this CPU runs the kernel (x86-64 with AVX-512F).
bool own_gemm_available() noexcept;

/// C = alpha op(A) op(B) + beta C for every batch entry of `g` (as Host::gemm),
/// float only, on the calling thread; C is not read when beta is 0, nor A and
/// B when alpha is 0 or k is 0 (as OpenBLAS; Eigen's product carries a NaN of
/// theirs into C). Call only where own_gemm_available().
void own_gemm(const GemmShape& g, float alpha, const float* a, const float* b, float beta, float* c);

}  // namespace shardex::host::detail
