// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The per-element and per-row math of the token layers (embedding
/// lookup and its scatter-add, the vocab-parallel cross-entropy, attention's
/// causal mask), written once
/// for both devices: `Host` loops over them and the Cuda kernels
/// (src/cuda/kernels.cu) call the same functions, so the host tests cover the
/// device's logic too.
///
/// A rank owns the rows (vocabulary entries) [first, first + rows) of a table
/// or the columns [first, first + cols) of a row of logits; an id outside that
/// range contributes nothing on this rank.

#include <cstdint>
#include <limits>

#include "shardex/core/host_device.hpp"

namespace shardex::tokens {

/// The local row that `id` selects on a rank owning rows [first, first + rows), or -1.
template <class I>
SHARDEX_HD inline std::int64_t owned_row(I id, std::int64_t first, std::int64_t rows) {
  const std::int64_t r = static_cast<std::int64_t>(id) - first;
  return r >= 0 && r < rows ? r : -1;
}

/// Element i = t * width + c of embedding's result: row ids[t] of the table
/// (local rows [first, first + rows), `width` columns) at column c, or zero
/// where this rank does not own the row.
template <class T, class I>
SHARDEX_HD inline T embedding_at(const T* table, const I* ids, std::int64_t i, std::int64_t width, std::int64_t first,
                                 std::int64_t rows) {
  const std::int64_t t = i / width, c = i % width;
  const std::int64_t r = owned_row(ids[t], first, rows);
  return r < 0 ? T(0) : table[r * width + c];
}

/// The scatter-add of embedding's backward for element i of the gradient g:
/// add(&dtable[row, c], g[i]) where this rank owns the row of ids[t]. `add`
/// is a plain += on the host and an atomic add on the device (two tokens may
/// select one row).
template <class T, class I, class Add>
SHARDEX_HD inline void embedding_grad_at(T* dtable, const I* ids, const T* g, std::int64_t i, std::int64_t width,
                                         std::int64_t first, std::int64_t rows, Add add) {
  const std::int64_t t = i / width, c = i % width;
  const std::int64_t r = owned_row(ids[t], first, rows);
  if (r >= 0) add(&dtable[r * width + c], g[i]);
}

/// The largest of a row's `cols` logits; -infinity for an empty row (a rank
/// that holds no columns), which the MAX all-reduce then ignores.
template <class T>
SHARDEX_HD inline T row_max(const T* row, std::int64_t cols) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t c = 0; c < cols; ++c) m = row[c] > m ? row[c] : m;
  return m;
}

/// For one row of logits with the global row max m: the sum of exp(x - m)
/// over this rank's columns (into *sum_exp) and the target's logit if this
/// rank owns the target's column, else zero (into *target_logit): the packed
/// pair that one SUM all-reduce completes.
template <class T, class I>
SHARDEX_HD inline void row_sum_exp_and_target(const T* row, std::int64_t cols, std::int64_t first, T m, I target,
                                              T* sum_exp, T* target_logit) {
  T s = T(0);
  for (std::int64_t c = 0; c < cols; ++c) s += math::exp(row[c] - m);
  *sum_exp = s;
  const std::int64_t c = owned_row(target, first, cols);
  *target_logit = c < 0 ? T(0) : row[c];
}

/// One row of logits read once, while it is in cache: its largest value
/// (into *max, -infinity for an empty row), the sum of exp(x - max) over
/// this rank's columns (into *sum_exp) and the target's logit as in
/// row_sum_exp_and_target. Vocab-parallel, each rank's sum is then taken to
/// the all-reduced max (rescaled_sum_exp) before the SUM all-reduce.
template <class T, class I>
SHARDEX_HD inline void row_max_sum_exp_and_target(const T* row, std::int64_t cols, std::int64_t first, I target, T* max,
                                                  T* sum_exp, T* target_logit) {
  *max = row_max(row, cols);
  row_sum_exp_and_target(row, cols, first, *max, target, sum_exp, target_logit);
}

/// A row's sum of exp(x - local_max) as a sum of exp(x - global_max): times
/// exp(local_max - global_max); an empty row's zero stays zero (its
/// local_max is -infinity, as the global one may be).
template <class T>
SHARDEX_HD inline T rescaled_sum_exp(T sum_exp, T local_max, T global_max) {
  return sum_exp == T(0) ? T(0) : sum_exp * math::exp(local_max - global_max);
}

/// Element i = t * cols + c of cross-entropy's logit gradient on this rank:
/// (softmax - one-hot of the target) * scale[t], with the row's global max
/// and sum of exponentials; scale[t] is the loss's gradient over the token
/// count (zero for an ignored token).
template <class T, class I>
SHARDEX_HD inline T cross_entropy_grad_at(const T* logits, const I* targets, const T* max, const T* sum_exp,
                                          const T* scale, std::int64_t i, std::int64_t cols, std::int64_t first) {
  const std::int64_t t = i / cols, c = i % cols;
  const T p = math::exp(logits[i] - max[t]) / sum_exp[t];
  const T hot = static_cast<std::int64_t>(targets[t]) == first + c ? T(1) : T(0);
  return (p - hot) * scale[t];
}

/// Element i of a (blocks, rows, cols) array of attention scores under the
/// causal mask, each block's row r being query first_row + r and its column
/// j key j: -infinity where the key comes after the query (j > first_row +
/// r), so that the row softmax gives it zero weight; unchanged elsewhere.
/// A whole (seq, seq) block is rows = cols = seq, first_row = 0.
template <class T>
SHARDEX_HD inline void causal_mask_at(T* scores, std::int64_t i, std::int64_t rows, std::int64_t cols,
                                      std::int64_t first_row) {
  if (i % cols > first_row + (i / cols) % rows) scores[i] = -std::numeric_limits<T>::infinity();
}

}  // namespace shardex::tokens
