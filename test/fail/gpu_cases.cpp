// SPDX-License-Identifier: MIT
// Compile-fail cases of the GPU backend (run_cases.py, as for cases.cpp): a
// strategy NCCL cannot run, and a fused tree too long for one GPU pass. Built
// only with the GPU backend; without SHARDEX_FAIL_CASE it must compile.
#include <shardex/cuda.hpp>

using namespace shardex;

void cases(const nccl::Communicator& comm) {
  auto s = Tensor<float, Sharded<0>, Cuda>::ones(comm, {4, 10}, layout_mapping<Sharded<0>>({1, 1, 1, 1}));
  auto x = Tensor<float, Replicated, Cuda>::ones(comm, {4, 10});
  (void)s, (void)x;
#if !defined(SHARDEX_FAIL_CASE)
  // The valid neighbours: the strategies NCCL has, and a tree of 16 operands.
  Tensor<float, Replicated, Cuda> ok1 = all_gather(s, strategy::padded);
  Tensor<float, Replicated, Cuda> ok2 = all_gather(s, strategy::per_root);
  Tensor<float, Replicated, Cuda> ok3 = x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x;
  (void)ok1, (void)ok2, (void)ok3;
#elif SHARDEX_FAIL_CASE == 1
  // expect: strategy::v_collective needs a backend with v collectives (MPI)
  Tensor<float, Replicated, Cuda> y = all_gather(s, strategy::v_collective);
#elif SHARDEX_FAIL_CASE == 2
  // expect: this element-wise expression is too long to fuse into one GPU pass
  Tensor<float, Replicated, Cuda> y = x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x;
#endif
#if defined(SHARDEX_FAIL_CASE)
  (void)y;
#endif
}

int main() {
  (void)&cases;
  return 0;
}
