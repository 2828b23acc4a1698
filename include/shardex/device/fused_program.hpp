#pragma once
/// @file
/// @brief `FusedProgram<T>`: a fused element-wise tree flattened into a short
/// program that one GPU kernel interprets per element.
///
/// On the host a fused tree is a C++ type and its pass is a template loop. A
/// GPU kernel cannot be instantiated for every user's tree inside a library
/// compiled once, so the tree is written out as instructions instead: each
/// instruction makes one value slot, from a leaf tensor or from earlier slots.
/// The interpreter below (`value_at`, `backprop_at`) is `SHARDEX_HD`: the CUDA
/// kernels run it, and the host tests run the same code against the template
/// loop, so the GPU pass is checked on machines without a GPU.

#include <cstdint>

#include "shardex/core/host_device.hpp"
#include "shardex/device/elementwise_ops.hpp"

namespace shardex {

struct FusedInstr {
  ops::OpCode op = ops::OpCode::leaf;
  int a = 0, b = 0;  ///< operand slots (earlier instructions)
  int leaf = 0;      ///< leaf index, for OpCode::leaf
  double alpha = 1;  ///< for OpCode::scale
};

template <class T>
struct FusedProgram {
  static constexpr int max_instrs = 32;
  static constexpr int max_leaves = 16;

  int n_instrs = 0, n_leaves = 0;
  FusedInstr instr[max_instrs];
  const T* leaf[max_leaves] = {};
  T* leaf_grad[max_leaves] = {};           ///< null: the leaf needs no gradient
  std::int64_t leaf_mod[max_leaves] = {};  ///< 0: read at i; else at i % mod (a broadcast bias)

  SHARDEX_HD std::int64_t leaf_index(int l, std::int64_t i) const { return leaf_mod[l] ? i % leaf_mod[l] : i; }

  /// Fills `v` (n_instrs slots) with the values at element i; returns the result.
  SHARDEX_HD T values_at(std::int64_t i, T* v) const {
    for (int j = 0; j < n_instrs; ++j) {
      const FusedInstr& in = instr[j];
      switch (in.op) {
        case ops::OpCode::leaf: v[j] = leaf[in.leaf][leaf_index(in.leaf, i)]; break;
        case ops::OpCode::add: v[j] = ops::Add{}.f(v[in.a], v[in.b]); break;
        case ops::OpCode::sub: v[j] = ops::Sub{}.f(v[in.a], v[in.b]); break;
        case ops::OpCode::mul: v[j] = ops::Mul{}.f(v[in.a], v[in.b]); break;
        case ops::OpCode::neg: v[j] = ops::Neg{}.f(v[in.a]); break;
        case ops::OpCode::scale: v[j] = ops::Scale{in.alpha}.f(v[in.a]); break;
        case ops::OpCode::gelu: v[j] = ops::Gelu{}.f(v[in.a]); break;
        case ops::OpCode::relu: v[j] = ops::Relu{}.f(v[in.a]); break;
        case ops::OpCode::tanh: v[j] = ops::Tanh{}.f(v[in.a]); break;
        case ops::OpCode::exp: v[j] = ops::Exp{}.f(v[in.a]); break;
      }
    }
    return v[n_instrs - 1];
  }

  /// The value at element i.
  SHARDEX_HD T value_at(std::int64_t i) const {
    T v[max_instrs];
    return values_at(i, v);
  }

  /// Pushes the output gradient `g` at element i back to the leaves: the
  /// forward values, then the adjoints in reverse instruction order. `add`
  /// writes a leaf's contribution; broadcast leaves are shared by many i, so
  /// the GPU passes an atomic add there.
  template <class AddTo>
  SHARDEX_HD void backprop_at(std::int64_t i, T g, AddTo add) const {
    T v[max_instrs], adj[max_instrs];
    values_at(i, v);
    for (int j = 0; j < n_instrs; ++j) adj[j] = T(0);
    adj[n_instrs - 1] = g;
    for (int j = n_instrs - 1; j >= 0; --j) {
      const FusedInstr& in = instr[j];
      const T gj = adj[j];
      switch (in.op) {
        case ops::OpCode::leaf:
          if (leaf_grad[in.leaf]) add(leaf_grad[in.leaf] + leaf_index(in.leaf, i), gj, leaf_mod[in.leaf] != 0);
          break;
        case ops::OpCode::add: ops::Add{}.df(v[in.a], v[in.b], gj, adj[in.a], adj[in.b]); break;
        case ops::OpCode::sub: ops::Sub{}.df(v[in.a], v[in.b], gj, adj[in.a], adj[in.b]); break;
        case ops::OpCode::mul: ops::Mul{}.df(v[in.a], v[in.b], gj, adj[in.a], adj[in.b]); break;
        case ops::OpCode::neg: ops::Neg{}.df(v[in.a], gj, adj[in.a]); break;
        case ops::OpCode::scale: ops::Scale{in.alpha}.df(v[in.a], gj, adj[in.a]); break;
        case ops::OpCode::gelu: ops::Gelu{}.df(v[in.a], gj, adj[in.a]); break;
        case ops::OpCode::relu: ops::Relu{}.df(v[in.a], gj, adj[in.a]); break;
        case ops::OpCode::tanh: ops::Tanh{}.df(v[in.a], gj, adj[in.a]); break;
        case ops::OpCode::exp: ops::Exp{}.df(v[in.a], gj, adj[in.a]); break;
      }
    }
  }
};

}  // namespace shardex
