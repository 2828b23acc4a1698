// SPDX-License-Identifier: MIT
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

/// One instruction of a FusedProgram: it makes one value slot.
struct FusedInstr {
  ops::OpCode op = ops::leaf_code;  ///< ops::code_of<Op>, or leaf_code
  /// The first operand's slot; `b`, the second's (binary operations).
  int a = 0, b = 0;     ///< operand slots (earlier instructions)
  int leaf = 0;         ///< leaf index, for leaf_code
  double constant = 1;  ///< the operation's constant (ops::has_constant): Scale's factor, Shift's addend
};

/// @brief A fused element-wise tree as instructions (see the file's note),
/// with pointers to its leaves' data and gradients on the device.
template <class T>
struct FusedProgram {
  ///@{
  /// The most instructions and leaves a program holds (a device tree beyond
  /// them is a compile error, expr/elementwise.hpp).
  static constexpr int max_instrs = 32;
  static constexpr int max_leaves = 16;
  ///@}

  ///@{
  /// The instructions and leaves in use, the instructions, and each leaf's data.
  int n_instrs = 0, n_leaves = 0;
  FusedInstr instr[max_instrs];
  const T* leaf[max_leaves] = {};
  ///@}
  T* leaf_grad[max_leaves] = {};           ///< null: the leaf needs no gradient
  std::int64_t leaf_mod[max_leaves] = {};  ///< 0: read at i; else at i % mod (a broadcast bias)

  /// Where leaf l is read for element i (i, or i mod its size when broadcast).
  SHARDEX_HD std::int64_t leaf_index(int l, std::int64_t i) const { return leaf_mod[l] ? i % leaf_mod[l] : i; }

  /// Fills `v` (n_instrs slots) with the values at element i; returns the result.
  SHARDEX_HD T values_at(std::int64_t i, T* v) const {
    for (int j = 0; j < n_instrs; ++j) {
      const FusedInstr& in = instr[j];
      v[j] = in.op == ops::leaf_code ? leaf[in.leaf][leaf_index(in.leaf, i)] : forward(ops::all_ops{}, in, v);
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
      if (in.op != ops::leaf_code) {
        backward(ops::all_ops{}, in, v, adj[j], adj);
      } else if (leaf_grad[in.leaf]) {
        add(leaf_grad[in.leaf] + leaf_index(in.leaf, i), adj[j], leaf_mod[in.leaf] != 0);
      }
    }
  }

private:
  // The two interpreters, generated from ops::all_ops: instruction code c runs
  // the (c-1)-th operation of the list (the last one without a test, as a
  // switch's default would).
  template <class Op>
  SHARDEX_HD static Op op_of(const FusedInstr& in) {
    if constexpr (ops::has_constant<Op>)
      return Op{in.constant};
    else
      return Op{};
  }
  template <int Code = 1, class Op, class... Rest>
  SHARDEX_HD static T forward(ops::op_list<Op, Rest...>, const FusedInstr& in, const T* v) {
    if constexpr (sizeof...(Rest) > 0) {
      if (in.op != Code) return forward<Code + 1>(ops::op_list<Rest...>{}, in, v);
    }
    if constexpr (Op::arity == 2)
      return op_of<Op>(in).f(v[in.a], v[in.b]);
    else
      return op_of<Op>(in).f(v[in.a]);
  }
  template <int Code = 1, class Op, class... Rest>
  SHARDEX_HD static void backward(ops::op_list<Op, Rest...>, const FusedInstr& in, const T* v, T g, T* adj) {
    if constexpr (sizeof...(Rest) > 0) {
      if (in.op != Code) return backward<Code + 1>(ops::op_list<Rest...>{}, in, v, g, adj);
    }
    if constexpr (Op::arity == 2)
      op_of<Op>(in).df(v[in.a], v[in.b], g, adj[in.a], adj[in.b]);
    else
      op_of<Op>(in).df(v[in.a], g, adj[in.a]);
  }
};

}  // namespace shardex
