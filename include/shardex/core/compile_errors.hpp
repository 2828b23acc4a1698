// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Every compile error of shardex, in one catalogue (as Eigen's
/// StaticAssert.h collects its messages): the text of each `static_assert`
/// in include/, named once. A `static_assert` takes only a string literal
/// (C++20), so each text is a macro. Each names the operation, what the
/// layouts involved are and the fix; the offending types appear in the
/// compiler's "In instantiation of ..." line just above. The compile-fail
/// cases of test/fail/ pin these texts, and the `layers` test refuses a
/// `static_assert` in include/ whose text is written anywhere but here.

// ---- shardex/autodiff/grad_norm.hpp --------------------------------------------------
#define SHARDEX_ERR_GRAD_NORM_NOT_SELF_DUAL                                                                \
  "shardex::grad_norm: a Replicated (or Partial) parameter's gradient is a pending sum over ranks, whose " \
  "norm is not its parts' norms; make the parameter Invariant and replicate(p) where it is used (its "     \
  "gradient is then all-reduced by the backward pass)"
#define SHARDEX_ERR_MESH_GRAD_NORM_NOT_SELF_DUAL                                                      \
  "shardex::grad_norm: a mesh parameter must be Invariant or Sharded on every axis (a Replicated or " \
  "Partial one's gradient is a pending sum); make it Invariant and replicate<axis>(p) where used"
// ---- shardex/autodiff/sgd.hpp --------------------------------------------------------
#define SHARDEX_ERR_SGD_PARAMETER_NOT_SELF_DUAL                                                           \
  "shardex::sgd_step: a Replicated (or Partial) parameter's gradient is not in its own layout; make the " \
  "parameter Invariant and replicate(p) where it is used"
// ---- shardex/backend/mpi/communicator.hpp --------------------------------------------
#define SHARDEX_ERR_MPI_ELEMENT_TYPE "shardex::mpi: the primitives move float, double, std::int64_t or char only"
// ---- shardex/core/shape.hpp ----------------------------------------------------------
#define SHARDEX_ERR_SHAPE_NEGATIVE_EXTENT "shardex::shape_c<...> requires every extent to be >= 0"
// ---- shardex/device/elementwise_ops.hpp ----------------------------------------------
#define SHARDEX_ERR_OP_CODES_FOLLOW_LIST "shardex: op codes follow all_ops"
#define SHARDEX_ERR_OP_STATE_NOT_IN_INSTRUCTION                                                                          \
  "shardex: an element-wise operation holds no state or one double constant (named alpha or c, see ops::has_constant): " \
  "a fused program carries nothing else into the device pass"
// ---- shardex/expr/attention.hpp ------------------------------------------------------
#define SHARDEX_ERR_ATTENTION_MIXED_LAYOUTS "shardex::attention(q, k, v) requires q, k and v to have the same layout"
#define SHARDEX_ERR_ATTENTION_SEQUENCE_SHARDED                                                       \
  "shardex::attention(q, k, v): q, k, v are sharded along the sequence (Sharded<0>), but attention " \
  "needs every position of a head on one rank; all_to_all<Sharded<1>>(x, head_lengths) first "       \
  "(DeepSpeed-Ulysses), or all_gather"
#define SHARDEX_ERR_ATTENTION_PARTIAL \
  "shardex::attention(q, k, v) of Partial tensors: softmax is not linear; all_reduce first"
#define SHARDEX_ERR_ATTENTION_SHARDED_DIM \
  "shardex::attention(q, k, v) on (seq, heads, dh): only the heads dim (Sharded<1>) may be sharded"
// ---- shardex/expr/elementwise.hpp ----------------------------------------------------
#define SHARDEX_ERR_ELEMENTWISE_MIXED_TYPES \
  "shardex: element-wise operands must have the same element type (float or double); convert one"
#define SHARDEX_ERR_OP_NOT_LISTED \
  "shardex: an element-wise operation that is not in ops::all_ops (device/elementwise_ops.hpp)"
#define SHARDEX_ERR_FUSED_TOO_LONG                                                                      \
  "shardex: this element-wise expression is too long to fuse into one GPU pass (at most 32 operations " \
  "and 16 operands); assign a part of it to a Tensor first"
// ---- shardex/expr/matmul.hpp ---------------------------------------------------------
#define SHARDEX_ERR_MATMUL_MIXED_TYPES \
  "shardex::matmul(a, b) requires a and b to have the same element type (float or double)"
// ---- shardex/expr/redistribute.hpp ---------------------------------------------------
#define SHARDEX_ERR_STRATEGY_NEEDS_V_COLLECTIVES                                                    \
  "shardex: strategy::v_collective needs a backend with v collectives (MPI); this tensor's device " \
  "communicates through a backend without them (NCCL): use strategy::padded, strategy::per_root, "  \
  "strategy::send_recv or strategy::automatic"
#define SHARDEX_ERR_REDISTRIBUTE_NO_ROUTE                                                             \
  "shardex::redistribute<To>(x): no route in the transition table leads from x's layout to To. From " \
  "Replicated there is no way to Invariant or Partial (n copies used separately are not one shared "  \
  "value nor one pending sum), and from Invariant none to Partial: say which rank holds what, e.g. "  \
  "zero_pad(slice<Sharded<D, ...>>(x))"
#define SHARDEX_ERR_ALL_GATHER_SOURCE                                                                     \
  "shardex::all_gather(x) requires x to be Sharded<D, ...>: a Replicated or Invariant tensor is already " \
  "whole, and a Partial one needs all_reduce(x)"
#define SHARDEX_ERR_ALL_GATHER_TARGET "shardex::all_gather<To>(x) gathers into Replicated (the default) or Invariant"
#define SHARDEX_ERR_REDUCE_SCATTER_SOURCE                                                               \
  "shardex::reduce_scatter<Sharded<D, ...>>(x) requires x to be Partial; to shard a Replicated tensor " \
  "use slice, to reshard a Sharded one use all_to_all or redistribute"
#define SHARDEX_ERR_ALL_REDUCE_SOURCE \
  "shardex::all_reduce(x) requires x to be Partial: only a pending sum has something to reduce"
#define SHARDEX_ERR_ALL_REDUCE_TARGET "shardex::all_reduce<To>(x) reduces into Replicated (the default) or Invariant"
#define SHARDEX_ERR_SLICE_SOURCE                                                                         \
  "shardex::slice<Sharded<D, ...>>(x) requires x to be Replicated or Invariant; a Partial tensor needs " \
  "reduce_scatter, a Sharded one all_to_all or redistribute"
#define SHARDEX_ERR_ALL_TO_ALL_SOURCE "shardex::all_to_all<Sharded<S, ...>>(x) requires x to be Sharded<C, ...>"
#define SHARDEX_ERR_REPLICATE_SOURCE \
  "shardex::replicate(x) requires x to be Invariant (one shared value, such as a parameter)"
#define SHARDEX_ERR_ZERO_PAD_SOURCE "shardex::zero_pad(x) requires x to be Sharded<D, ...>"
// ---- shardex/expr/rules.hpp ----------------------------------------------------------
#define SHARDEX_ERR_INVARIANT_MEETS_PER_RANK                                                       \
  "shardex: an Invariant tensor meets a per-rank tensor in a local operation; wrap the Invariant " \
  "operand in replicate(x), which is where its gradient's all-reduce comes from"
#define SHARDEX_ERR_ADD_LAYOUTS                                                                   \
  "shardex::operator+(a, b) and operator-(a, b) require a and b to have the same layout; insert " \
  "redistribute<To>(...) on one operand to bring it to the other's layout"
#define SHARDEX_ERR_MUL_PARTIAL_PARTIAL                                                                 \
  "shardex::operator*(a, b) with a and b both Partial: the product of two pending sums is not the sum " \
  "of the products; all_reduce one operand first"
#define SHARDEX_ERR_DIV_BY_PARTIAL                                                                        \
  "shardex::operator/(a, b) with b Partial: dividing by a pending sum is not the sum of dividing by its " \
  "parts; all_reduce(b) first (a Partial a over a whole b is fine: each part is divided alike)"
#define SHARDEX_ERR_SHIFT_PARTIAL                                                                          \
  "shardex: a + c (or a - c, c - a) with a Partial: every rank would add c to its part, so the sum would " \
  "hold c once per rank; all_reduce(a) first"
#define SHARDEX_ERR_MUL_LAYOUTS                                                                \
  "shardex::operator*(a, b) requires a and b to have the same layout (or one Partial and one " \
  "Replicated); insert redistribute<To>(...) on one operand"
#define SHARDEX_ERR_NONLINEAR_PARTIAL                                                                     \
  "shardex: a non-linear function (gelu, relu, tanh, exp, sqrt, rsqrt, log, sigmoid, silu) of a Partial " \
  "tensor is not the sum of the "                                                                         \
  "function of its parts; reduce first: all_reduce(x) or reduce_scatter<Sharded<D, ...>>(x)"
#define SHARDEX_ERR_BIAS_PARTIAL                                                                     \
  "shardex::add_bias(x, b) with x Partial: the bias would be added once per rank to a pending sum; " \
  "reduce x first (all_reduce or reduce_scatter), then add the bias"
#define SHARDEX_ERR_BIAS_NO_RULE                                                                         \
  "shardex::add_bias(x, b) has no rule for these layouts: use (Replicated, Replicated), (Sharded along " \
  "a row dim, Replicated), or (Sharded along the last dim, Sharded<0> with the same lengths)"
#define SHARDEX_ERR_BIAS_SHARDED_NOT_DIM0 \
  "shardex::add_bias(x, b): a sharded bias is 1-d, so it must be Sharded<0, ...>"
#define SHARDEX_ERR_MATMUL_PARTIAL_PARTIAL                                                              \
  "shardex::matmul(a, b) with a and b both Partial: the product of two pending sums is not the sum of " \
  "the products; all_reduce one operand first"
#define SHARDEX_ERR_MATMUL_A_CONTRACTION_SHARDED                                                      \
  "shardex::matmul(a, b): a is sharded along its contraction dim (Sharded<1>) but b is not sharded "  \
  "along its rows; make b Sharded<0> with the same lengths (row-parallel: the result is Partial) or " \
  "all_gather a"
#define SHARDEX_ERR_MATMUL_B_CONTRACTION_SHARDED                                                         \
  "shardex::matmul(a, b): b is sharded along its contraction dim (Sharded<0>) but a is not sharded "     \
  "along its columns; make a Sharded<1> with the same lengths (row-parallel: the result is Partial) or " \
  "all_gather b"
#define SHARDEX_ERR_MATMUL_NO_RULE                                                                        \
  "shardex::matmul(a, b) has no layout rule for these operands; the rules are R x R -> R, I x I -> I, P " \
  "x R -> P, R x P -> P, R x S<1> -> S<1> (column-parallel), S<1> x S<0> -> P (row-parallel), S<0> x R "  \
  "-> S<0>; insert redistribute<To>(...) to reach one of them"
#define SHARDEX_ERR_TRANSPOSE_DIM "shardex::transpose(x) is for 2-d tensors, but x is Sharded along a dim >= 2"
// ---- shardex/expr/sum.hpp ------------------------------------------------------------
#define SHARDEX_ERR_SUM_DIM "shardex::sum<K>(x) needs a dim K >= 0 (sum(x) sums all dims)"
// ---- shardex/io/ ------------------------------------------------------------------
#define SHARDEX_ERR_SAVE_PARTIAL                                                                          \
  "shardex::save: a Partial tensor is a pending sum, not a value to store; all_reduce it (or "            \
  "reduce_scatter it to keep it sharded) first. save refuses rather than reducing behind your back: the " \
  "reduction is a collective the caller chooses"
#define SHARDEX_ERR_LOAD_MESH_HOST_ONLY                                                             \
  "shardex::load of a mesh tensor: this version loads onto host meshes; load on the host mesh and " \
  "to_mesh(x, device_mesh) it"
#define SHARDEX_ERR_LOAD_PARTIAL                                                                          \
  "shardex::load<T, Partial>: a file holds a value, not a pending sum; load it Replicated, Invariant or " \
  "Sharded"
// ---- shardex/layout/layouts.hpp ------------------------------------------------------
#define SHARDEX_ERR_SHARDED_NEGATIVE_DIM \
  "shardex::Sharded<D, ...> requires D >= 0: D is the tensor dim that is split over the ranks"
// ---- shardex/layout/mapping.hpp -----------------------------------------------------
#define SHARDEX_ERR_DYNAMIC_LENGTHS_MISSING                                                             \
  "shardex: the target layout Sharded<D> has dynamic lengths, so the call needs them: pass one length " \
  "per rank, e.g. reduce_scatter<Sharded<0>>(x, {3, 0, 5, 2}), or give the layout static lengths<...>"
// ---- shardex/layout/lengths.hpp ------------------------------------------------------
#define SHARDEX_ERR_LENGTHS_EMPTY "shardex::lengths<...> needs one length per rank; an empty list fits no communicator"
#define SHARDEX_ERR_LENGTHS_NEGATIVE \
  "shardex::lengths<...> requires every length to be >= 0 (zero is legal: the rank holds nothing)"
// ---- shardex/mesh/ ---------------------------------------------------------------
#define SHARDEX_ERR_MESH_AXIS_SIZE \
  "shardex::axis<Name, Size>: the size of an axis is >= 1, or 0 for one given when the mesh is made"
#define SHARDEX_ERR_MESH_NO_AXES \
  "shardex::Mesh<Axes...>: a mesh needs at least one axis (Mesh<axis<\"tp\">> is plain tensor parallelism)"
#define SHARDEX_ERR_MESH_NO_SUCH_AXIS                                                                  \
  "shardex: a transition along an axis this mesh does not have; name one of the axes of the tensor's " \
  "Mesh<...> (the axis and the mesh are in the instantiation above)"
#define SHARDEX_ERR_MESH_LAYOUT_COUNT \
  "shardex::MeshTensor<T, Mesh, per_axis<...>>: give one layout per mesh axis, in the mesh's order"
#define SHARDEX_ERR_MESH_DIM_SHARDED_TWICE                                                            \
  "shardex::MeshTensor: two mesh axes shard the same tensor dim; shard one dim per axis (all_gather " \
  "along one of them first, or shard another dim)"
#define SHARDEX_ERR_MESH_STATIC_LENGTHS_COUNT                                                            \
  "shardex::MeshTensor: static lengths<...> on an axis of static size need one length per rank of that " \
  "axis; fix the count, or make the lengths dynamic_lengths"
#define SHARDEX_ERR_MESH_MIXED_MESHES                                                                   \
  "shardex: the operands live on meshes of different types (axes or device); tensors meet only on one " \
  "mesh"
#define SHARDEX_ERR_MESH_INVARIANT_MEETS_PER_RANK                                                          \
  "shardex: on one mesh axis an Invariant operand meets a per-rank one (Replicated, Partial or "           \
  "Sharded); replicate<axis>(x) the Invariant operand along that axis first, so that its gradient is "     \
  "all-reduced over the axis (on the data-parallel axis: the DDP all-reduce); the axis and the operands' " \
  "layouts on it are in the instantiation line above"
#define SHARDEX_ERR_MESH_SGD_NOT_SELF_DUAL                                                           \
  "shardex::sgd_step: a mesh parameter must be Invariant or Sharded on every axis (a Replicated or " \
  "Partial one's gradient is not in its own layout); make it Invariant and replicate<axis>(p) where used"
// ---- shardex/nn/embedding.hpp ---------------------------------------------------------
#define SHARDEX_ERR_EMBEDDING_PARTIAL_TABLE                                                            \
  "shardex::embedding(ids, table): the table is Partial (a pending sum); reduce it first (all_reduce " \
  "to Replicated or Invariant, or reduce_scatter to Sharded<0>)"
#define SHARDEX_ERR_EMBEDDING_SHARDED_TABLE_SHARDED_IDS                                                   \
  "shardex::embedding(ids, table): a Sharded table needs the ids whole on every rank (Invariant or "      \
  "Replicated), since each rank looks up every token in its part of the table; gather the ids first, or " \
  "use a whole table with Sharded<0> ids"
#define SHARDEX_ERR_EMBEDDING_TABLE_DIM \
  "shardex::embedding(ids, table): the table (vocab, hidden) is Sharded<0> (vocab-parallel) or Sharded<1> (hidden)"
#define SHARDEX_ERR_EMBEDDING_INVARIANT_TABLE                                                           \
  "shardex::embedding(ids, table): an Invariant table meets per-rank ids (Replicated or Sharded); use " \
  "replicate(table), whose backward all-reduces the table's gradient, or make the ids Invariant"
#define SHARDEX_ERR_EMBEDDING_IDS_DIM "shardex::embedding(ids, table): the ids are 1-d (tokens); shard them along dim 0"
#define SHARDEX_ERR_EMBEDDING_IDS_NOT_INTEGER                                                              \
  "shardex::embedding(ids, table): ids must be token ids (a Tensor of std::int32_t or std::int64_t), not " \
  "a float tensor"
#define SHARDEX_ERR_EMBEDDING_TABLE_NOT_FLOAT \
  "shardex::embedding(ids, table): the table must be a float or double tensor (vocab, hidden)"
#define SHARDEX_ERR_EMBEDDING_DEVICES "shardex: the token ids and the float tensor must be on the same device"
// ---- shardex/nn/causal_attention.hpp ---------------------------------------------------
#define SHARDEX_ERR_CAUSAL_ATTENTION_SEQUENCE_SHARDED                                                    \
  "shardex::causal_attention(q, k, v): q, k, v (batch, seq, heads, dh) are sharded along the sequence; " \
  "every query needs the keys before it: all_to_all to Sharded<2> (the heads) first"
#define SHARDEX_ERR_CAUSAL_ATTENTION_SHARDED_DIM                                                              \
  "shardex::causal_attention(q, k, v) on (batch, seq, heads, dh) takes whole tensors, Sharded<2> (heads) or " \
  "Sharded<0> (the batch)"
// ---- shardex/nn/cross_entropy.hpp -----------------------------------------------------
#define SHARDEX_ERR_CROSS_ENTROPY_PARTIAL                                                                  \
  "shardex::cross_entropy(logits, targets): the logits are Partial (a pending sum), and the softmax of a " \
  "part is not a part of the softmax; reduce first (all_reduce to Replicated or Invariant, or "            \
  "reduce_scatter to Sharded<1> along the vocabulary)"
#define SHARDEX_ERR_CROSS_ENTROPY_TOKENS_SHARDED                                                               \
  "shardex::cross_entropy(logits, targets): the logits (tokens, vocab) may be Sharded<1> (vocab-parallel) or " \
  "whole; for logits sharded along the tokens, all_to_all them to Sharded<1> first"
#define SHARDEX_ERR_CROSS_ENTROPY_TARGETS_WHOLE                                                     \
  "shardex::cross_entropy(logits, targets): the targets must be whole on every rank (Invariant or " \
  "Replicated token ids)"
#define SHARDEX_ERR_CROSS_ENTROPY_TARGETS_NOT_INTEGER                                                \
  "shardex::cross_entropy(logits, targets): targets must be token ids (a Tensor of std::int32_t or " \
  "std::int64_t), not a float tensor"
// ---- shardex/nn/heads.hpp -------------------------------------------------------------
#define SHARDEX_ERR_HEADS_PARTIAL \
  "shardex::split_heads / merge_heads: x is Partial; reduce it first (all_reduce or reduce_scatter)"
#define SHARDEX_ERR_HEADS_SHARDED_DIM                                                                     \
  "shardex::split_heads / merge_heads: a sharded x must be split along the heads: Sharded<1> for "        \
  "split_heads' (tokens, heads * dh), Sharded<2> for merge_heads' (batch, seq, heads, dh); redistribute " \
  "it first"
// ---- shardex/nn/norm.hpp --------------------------------------------------------------
#define SHARDEX_ERR_NORM_PARTIAL                                                                        \
  "shardex::layer_norm / rms_norm: x is Partial (a pending sum), and the norm of a part is not a part " \
  "of the norm; reduce first (all_reduce, or reduce_scatter to Sharded<0> along the tokens)"
#define SHARDEX_ERR_NORM_LAST_DIM_SHARDED                                                                \
  "shardex::layer_norm / rms_norm: x (tokens, hidden) is sharded along the hidden dim the norm reduces " \
  "over; it must be whole on each rank: all_gather it, or all_to_all it to Sharded<0> (the tokens)"
#define SHARDEX_ERR_NORM_WEIGHT_SHARDED \
  "shardex::layer_norm / rms_norm: the weight and bias (hidden) are whole: Invariant, or replicate(w)"
#define SHARDEX_ERR_NORM_SP_WEIGHT_INVARIANT                                                                 \
  "shardex::layer_norm / rms_norm: x is Sharded along the tokens (sequence parallelism) and the weight is "  \
  "Invariant; pass replicate(weight) (and replicate(bias)): its backward all-reduces the weight's gradient " \
  "over the ranks, which a hand-written norm forgets"
// ---- shardex/tensor/tensor.hpp -------------------------------------------------------
#define SHARDEX_ERR_TOKEN_IDS_PARTIAL                                                                       \
  "shardex::Tensor<int, Partial>: token ids are indices, and a pending sum of indices means nothing; make " \
  "the ids Invariant, Replicated or Sharded"
#define SHARDEX_ERR_TOKEN_IDS_NO_GRADIENT                                                                 \
  "shardex::Tensor<int, L>::requires_grad(): token ids are integers and have no gradient; the parameter " \
  "is the embedding table they index (a float tensor)"
#define SHARDEX_ERR_TOKEN_IDS_FLOAT_ONLY                                                                  \
  "shardex: this operation takes floating-point tensors (float or double), and this one holds token ids " \
  "(int32 or int64); ids enter the model through embedding(ids, table) or cross_entropy(logits, targets)"
#define SHARDEX_ERR_TENSOR_NO_SHARDED_DIM                                                                 \
  "shardex::Tensor<T, Sharded<D, ...>>: the tensor has no dim D (D >= its rank); shard along one of its " \
  "dims"
#define SHARDEX_ERR_TENSOR_STATIC_LENGTHS_SUM                                                            \
  "shardex::Tensor<T, Sharded<D, lengths<...>>>: the static lengths do not sum to the extent of dim D; " \
  "fix the lengths or the shape"
#define SHARDEX_ERR_TENSOR_EXPR_LAYOUT                                                               \
  "shardex::Tensor<T, L>: the expression has another layout than the tensor it initializes; insert " \
  "redistribute<L>(expr), or declare the tensor with auto"
#define SHARDEX_ERR_TENSOR_EXPR_TYPE "shardex::Tensor<T, L>: the expression has another element type (float vs double)"
// ---- shardex/transition/table.hpp ----------------------------------------------------
#define SHARDEX_ERR_TRANSITION_NO_ENTRY                                                                           \
  "shardex::apply_transition<To>(x): no single transition connects x's layout to To (see transition/table.hpp); " \
  "go through an intermediate layout, e.g. all_gather then slice"
#define SHARDEX_ERR_ADJOINT_MISSING "shardex: a transition whose adjoint is missing from the table (a bug in shardex)"
