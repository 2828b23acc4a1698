// SPDX-License-Identifier: MIT
// What every user of the host backend would otherwise compile for itself:
// the transition table's host entries for float and double with run-time
// lengths (transition/table.hpp declares them extern) and Eigen's kernel
// behind Host::sum (device/host/host.hpp); Host::gemm is in host_gemm.cpp.
#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/host.hpp"
#include "shardex/transition/table.hpp"

namespace shardex {

template <class T>
T Host::sum(const T* x, std::int64_t n) {
  return n == 0 ? T(0) : host::ConstArrayMap<T>(x, static_cast<Eigen::Index>(n)).sum();
}

template float Host::sum<float>(const float*, std::int64_t);
template double Host::sum<double>(const double*, std::int64_t);

#define SHARDEX_INSTANTIATE_APPLY_TRANSITION(T, From, To) template SHARDEX_APPLY_TRANSITION_SIGNATURE(T, From, To)
SHARDEX_HOST_TRANSITIONS(SHARDEX_INSTANTIATE_APPLY_TRANSITION, float)
SHARDEX_HOST_TRANSITIONS(SHARDEX_INSTANTIATE_APPLY_TRANSITION, double)

}  // namespace shardex
