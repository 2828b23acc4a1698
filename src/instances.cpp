// SPDX-License-Identifier: MIT
// What every user of the host backend would otherwise compile for itself:
// the transition table's host entries for float and double with run-time
// lengths (transition/table.hpp declares them extern) and Eigen's kernels
// behind Host::gemm and Host::sum (device/host/host.hpp).
#include "shardex/device/host/host.hpp"
#include "shardex/transition/table.hpp"

namespace shardex {

template void Host::gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
template void Host::gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);
template float Host::sum<float>(const float*, std::int64_t);
template double Host::sum<double>(const double*, std::int64_t);

#define SHARDEX_INSTANTIATE_APPLY_TRANSITION(T, From, To) template SHARDEX_APPLY_TRANSITION_SIGNATURE(T, From, To)
SHARDEX_HOST_TRANSITIONS(SHARDEX_INSTANTIATE_APPLY_TRANSITION, float)
SHARDEX_HOST_TRANSITIONS(SHARDEX_INSTANTIATE_APPLY_TRANSITION, double)

}  // namespace shardex
