// SPDX-License-Identifier: MIT
// Compile-fail cases: each `#elif SHARDEX_FAIL_CASE == N` block must fail to
// compile with the message on its `// expect:` line (run_cases.py checks both).
// Without SHARDEX_FAIL_CASE the file must compile: it is built as part of the
// test suite, so every case is one small step away from valid code.
#include <shardex.hpp>
#include <shardex/mesh.hpp>

using namespace shardex;
using S1 = Sharded<1, lengths<1, 2, 3, 4>>;
using dp = axis<"dp">;
using tp = axis<"tp">;
using M = Mesh<dp, tp>;

void cases(const mpi::Communicator& comm) {
  auto r = Tensor<float, Replicated>::ones(comm, {4, 10});
  auto i = Tensor<float, Invariant>::ones(comm, {4, 10});
  auto p = Tensor<float, Partial>::ones(comm, {4, 10});
  auto s0 = Tensor<float, Sharded<0>>::ones(comm, {4, 10}, layout_mapping<Sharded<0>>({1, 1, 1, 1}));
  auto s1 = Tensor<float, S1>::ones(comm, {4, 10});
  auto w = Tensor<float, Replicated>::ones(comm, {10, 10});
  auto wd = Tensor<double, Replicated>::ones(comm, {10, 10});
  (void)r, (void)i, (void)p, (void)s0, (void)s1, (void)w, (void)wd;
  const M mesh(comm, {2, 2});
  auto mx = MeshTensor<float, M, per_axis<Sharded<0>, Replicated>>::zeros(mesh, {4, 10}, {{1, 3}, {}});
  auto mw = MeshTensor<float, M, per_axis<Invariant, Sharded<1>>>::zeros(mesh, {10, 6}, {{}, {2, 4}});
  (void)mx, (void)mw;
  auto ids = Tensor<std::int64_t, Invariant>::zeros(comm, {4});
  auto sids = Tensor<std::int64_t, Sharded<0>>::zeros(comm, {4}, layout_mapping<Sharded<0>>({1, 1, 1, 1}));
  auto table0 = Tensor<float, Sharded<0>>::ones(comm, {10, 8}, layout_mapping<Sharded<0>>({1, 2, 3, 4}));
  (void)ids, (void)sids, (void)table0;
#if !defined(SHARDEX_FAIL_CASE)
  // The valid neighbours of the cases below.
  Tensor<float, Partial> ok1 = matmul(s1, Tensor<float, Sharded<0, lengths<1, 2, 3, 4>>>::ones(comm, {10, 10}));
  Tensor<float, Replicated> ok2 = gelu(all_reduce(p)) + r;
  Tensor<float, Replicated> ok3 = replicate(i) * r;
  Tensor<float, Replicated> ok4 = all_gather(s1);
  auto ok5 = Tensor<float, S1>::zeros(comm, shape_c<5, 10>);
  // One signature takes the lengths, static (none) or dynamic (a braced list), then a strategy.
  auto ok6 = reduce_scatter<Sharded<0>>(p, {1, 1, 1, 1});
  auto ok7 = reduce_scatter<S1>(p, Strategy::padded);
  auto ok8 = all_to_all<Sharded<1>>(s0, {1, 2, 3, 4}, Strategy::padded);
  (void)ok1, (void)ok2, (void)ok3, (void)ok4, (void)ok5, (void)ok6, (void)ok7, (void)ok8;
  // Meshes: the weight replicated along dp before it meets the dp-sharded batch.
  auto ok9 = matmul(mx, replicate<dp>(mw));
  auto ok10 = all_gather<dp>(mx);
  MeshTensor<float, Mesh<axis<"dp", 2>, tp>, per_axis<Sharded<0, lengths<1, 3>>, Replicated>> ok11;
  (void)ok9, (void)ok10, (void)ok11;
  // Token ids: a vocab-parallel lookup all-reduced, vocab-parallel cross-entropy.
  Tensor<float, Invariant> ok12 = all_reduce<Invariant>(embedding(ids, table0));
  Tensor<float, Invariant> ok13 = cross_entropy(s1, Tensor<std::int32_t, Invariant>::zeros(comm, {4}));
  (void)ok12, (void)ok13;
  // Sequence parallelism: the Invariant norm weight replicated where it meets the tokens' shards.
  auto ln_w = Tensor<float, Invariant>::ones(comm, {10});
  Tensor<float, Sharded<0>> ok14 = layer_norm(s0, replicate(ln_w), replicate(ln_w));
  (void)ok14;
  // Heads split over the ranks (lengths in heads), causal attention, and back to the tokens' matrix.
  auto qkv = Tensor<float, Sharded<1>>::ones(comm, {8, 20}, layout_mapping<Sharded<1>>({2, 4, 6, 8}));
  Tensor<float, Sharded<1>> ok15 =
      merge_heads(causal_attention(split_heads(qkv, 2, 2), split_heads(qkv, 2, 2), split_heads(qkv, 2, 2)));
  (void)ok15;
#elif SHARDEX_FAIL_CASE == 1
  // expect: shardex::matmul(a, b) has no layout rule for these operands
  auto y = matmul(p, Tensor<float, Sharded<1>>::ones(comm, {10, 10}, layout_mapping<Sharded<1>>({1, 2, 3, 4})));
#elif SHARDEX_FAIL_CASE == 2
  // expect: a is sharded along its contraction dim (Sharded<1>) but b is not sharded along its rows
  auto y = matmul(s1, w);
#elif SHARDEX_FAIL_CASE == 3
  // expect: a non-linear function (gelu, relu, tanh, exp, sqrt, rsqrt, log, sigmoid, silu) of a Partial tensor is not the sum
  auto y = gelu(p);
#elif SHARDEX_FAIL_CASE == 4
  // expect: shardex::operator+(a, b) and operator-(a, b) require a and b to have the same layout
  auto y = r + s1;
#elif SHARDEX_FAIL_CASE == 5
  // expect: wrap the Invariant operand in replicate(x)
  auto y = i * r;
#elif SHARDEX_FAIL_CASE == 6
  // expect: the tensor has no dim D (D >= its rank)
  auto y = Tensor<float, Sharded<2, lengths<1, 1>>>::zeros(comm, shape_c<2, 2>);
#elif SHARDEX_FAIL_CASE == 7
  // expect: the static lengths do not sum to the extent of dim D
  auto y = Tensor<float, S1>::zeros(comm, shape_c<5, 12>);
#elif SHARDEX_FAIL_CASE == 8
  // expect: no route in the transition table leads from x's layout to To
  Tensor<float, Partial> y = redistribute<Partial>(r);
#elif SHARDEX_FAIL_CASE == 9
  // expect: shardex::all_gather(x) requires x to be Sharded<D, ...>
  auto y = all_gather(p);
#elif SHARDEX_FAIL_CASE == 10
  // expect: shardex::reduce_scatter<Sharded<D, ...>>(x) requires x to be Partial
  auto y = reduce_scatter<S1>(r);
#elif SHARDEX_FAIL_CASE == 11
  // expect: the bias would be added once per rank to a pending sum
  auto y = add_bias(p, Tensor<float, Replicated>::ones(comm, {10}));
#elif SHARDEX_FAIL_CASE == 12
  // expect: the product of two pending sums is not the sum of the products
  auto y = p * p;
#elif SHARDEX_FAIL_CASE == 13
  // expect: the expression has another layout than the tensor it initializes
  Tensor<float, Replicated> y = all_gather<Invariant>(s1);
#elif SHARDEX_FAIL_CASE == 14
  // expect: shardex::lengths<...> requires every length to be >= 0
  auto y = Tensor<float, Sharded<0, lengths<2, -1>>>::zeros(comm, {1, 1});
#elif SHARDEX_FAIL_CASE == 15
  // expect: shardex::replicate(x) requires x to be Invariant
  auto y = replicate(r);
#elif SHARDEX_FAIL_CASE == 16
  // expect: element-wise operands must have the same element type
  auto y = w + wd;
#elif SHARDEX_FAIL_CASE == 17
  // expect: shardex::all_reduce(x) requires x to be Partial
  auto y = all_reduce(r);
#elif SHARDEX_FAIL_CASE == 18
  // expect: b is sharded along its contraction dim (Sharded<0>) but a is not sharded along its columns
  auto y = matmul(r, Tensor<float, Sharded<0>>::ones(comm, {10, 10}, layout_mapping<Sharded<0>>({1, 2, 3, 4})));
#elif SHARDEX_FAIL_CASE == 19
  // expect: shardex::transpose(x) is for 2-d tensors
  auto y = transpose(Tensor<float, Sharded<2>>::ones(comm, {2, 2, 4}, layout_mapping<Sharded<2>>({1, 1, 1, 1})));
#elif SHARDEX_FAIL_CASE == 20
  // expect: no route in the transition table leads from x's layout to To
  Tensor<float, Invariant> y = redistribute<Invariant>(r);
#elif SHARDEX_FAIL_CASE == 21
  // expect: has dynamic lengths, so the call needs them: pass one length per rank
  auto y = reduce_scatter<Sharded<0>>(p);
#elif SHARDEX_FAIL_CASE == 22
  // expect: has dynamic lengths, so the call needs them: pass one length per rank
  auto y = eager::all_to_all<Sharded<1>>(s0, Strategy::padded);
#elif SHARDEX_FAIL_CASE == 23
  // expect: a transition along an axis this mesh does not have
  auto y = all_gather<axis<"pp">>(mx);
#elif SHARDEX_FAIL_CASE == 24
  // expect: the operands live on meshes of different types
  const Mesh<dp, axis<"pp">> other(comm, {2, 2});
  auto y = mx + MeshTensor<float, Mesh<dp, axis<"pp">>, per_axis<Sharded<0>, Replicated>>::zeros(other, {4, 10},
                                                                                                 {{1, 3}, {}});
#elif SHARDEX_FAIL_CASE == 25
  // expect: on one mesh axis an Invariant operand meets a per-rank one
  auto y = matmul(mx, mw);
#elif SHARDEX_FAIL_CASE == 26
  // expect: static lengths<...> on an axis of static size need one length per rank of that axis
  MeshTensor<float, Mesh<axis<"dp", 2>, tp>, per_axis<Sharded<0, lengths<1, 2, 3>>, Replicated>> y;
#elif SHARDEX_FAIL_CASE == 27
  // expect: two mesh axes shard the same tensor dim
  MeshTensor<float, M, per_axis<Sharded<0>, Sharded<0>>> y;
#elif SHARDEX_FAIL_CASE == 28
  // expect: give one layout per mesh axis, in the mesh's order
  MeshTensor<float, M, per_axis<Sharded<0>>> y;
#elif SHARDEX_FAIL_CASE == 29
  // expect: a mesh parameter must be Invariant or Sharded on every axis
  auto y = mx;
  sgd_step(0.1, y);
#elif SHARDEX_FAIL_CASE == 30
  // expect: shardex::grad_norm: a Replicated (or Partial) parameter's gradient is a pending sum over ranks
  auto y = grad_norm(s0, r);
#elif SHARDEX_FAIL_CASE == 31
  // expect: shardex::grad_norm: a mesh parameter must be Invariant or Sharded on every axis
  auto y = clip_grad_norm(1.0, mw, mx);
#elif SHARDEX_FAIL_CASE == 32
  // expect: shardex::operator/(a, b) with b Partial: dividing by a pending sum is not the sum of dividing by its parts
  auto y = eval(r / p);
#elif SHARDEX_FAIL_CASE == 33
  // expect: a + c (or a - c, c - a) with a Partial: every rank would add c to its part
  auto y = eval(1.0 - p);
#elif SHARDEX_FAIL_CASE == 34
  // expect: shardex::cross_entropy(logits, targets): the logits are Partial (a pending sum)
  auto y = cross_entropy(p, ids);
#elif SHARDEX_FAIL_CASE == 35
  // expect: shardex::embedding(ids, table): ids must be token ids (a Tensor of std::int32_t or std::int64_t)
  auto y = embedding(r, table0);
#elif SHARDEX_FAIL_CASE == 36
  // expect: a Sharded table needs the ids whole on every rank (Invariant or Replicated)
  auto y = embedding(sids, table0);
#elif SHARDEX_FAIL_CASE == 37
  // expect: an Invariant table meets per-rank ids (Replicated or Sharded); use replicate(table)
  auto y = embedding(sids, i);
#elif SHARDEX_FAIL_CASE == 38
  // expect: shardex::embedding(ids, table): the table is Partial (a pending sum); reduce it first
  auto y = embedding(ids, p);
#elif SHARDEX_FAIL_CASE == 39
  // expect: this operation takes floating-point tensors (float or double), and this one holds token ids
  auto y = ids + ids;
#elif SHARDEX_FAIL_CASE == 40
  // expect: token ids are integers and have no gradient
  auto y = ids;
  y.requires_grad();
#elif SHARDEX_FAIL_CASE == 41
  // expect: token ids are indices, and a pending sum of indices means nothing
  Tensor<std::int64_t, Partial> y;
#elif SHARDEX_FAIL_CASE == 42
  // expect: for logits sharded along the tokens, all_to_all them to Sharded<1> first
  auto y = cross_entropy(s0, ids);
#elif SHARDEX_FAIL_CASE == 43
  // expect: shardex::cross_entropy(logits, targets): targets must be token ids
  auto y = cross_entropy(s1, r);
#elif SHARDEX_FAIL_CASE == 44
  // expect: x (tokens, hidden) is sharded along the hidden dim the norm reduces over
  auto y = rms_norm(s1, r);
#elif SHARDEX_FAIL_CASE == 45
  // expect: x is Sharded along the tokens (sequence parallelism) and the weight is Invariant; pass replicate(weight)
  auto ln_w = Tensor<float, Invariant>::ones(comm, {10});
  auto y = layer_norm(s0, ln_w, ln_w);
#elif SHARDEX_FAIL_CASE == 46
  // expect: shardex::causal_attention(q, k, v): q, k, v (batch, seq, heads, dh) are sharded along the sequence
  auto q4 = Tensor<float, Sharded<1>>::ones(comm, {2, 4, 3, 2}, layout_mapping<Sharded<1>>({1, 1, 1, 1}));
  auto y = causal_attention(q4, q4, q4);
#elif SHARDEX_FAIL_CASE == 47
  // expect: shardex::split_heads / merge_heads: a sharded x must be split along the heads
  auto y = split_heads(s0, 2, 2);
#endif
#if defined(SHARDEX_FAIL_CASE)
  (void)y;
#endif
}

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  (void)&cases;
  return 0;
}
