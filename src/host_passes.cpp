// SPDX-License-Identifier: MIT
// The host's row and reduction passes (declared in include/shardex/device/host/host.hpp),
// compiled once here for float and double at the library's optimization: vectorized
// (Eigen array expressions, or loops under SHARDEX_SIMD), whose math is the element and
// row functions of include/shardex/device/norm_ops.hpp and token_ops.hpp that the Cuda
// kernels run (test/dist/test_layers.cpp checks the two against each other). Scalar
// loops that walked columns or called libm per element were 10-40x slower
// (bench/RESULTS.md, "The model layers").
#include <cmath>
#include <cstdint>
#include <limits>

#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/host.hpp"

// SHARDEX_SIMD (core/host_device.hpp) for a loop that sums into the named variables.
#if defined(SHARDEX_OPENMP_SIMD)
#define SHARDEX_PRAGMA(text) _Pragma(#text)
#define SHARDEX_SIMD_REDUCE(...) SHARDEX_PRAGMA(omp simd reduction(+ : __VA_ARGS__))
#else
#define SHARDEX_SIMD_REDUCE(...)
#endif

namespace shardex {

namespace {
// Row r of the norms' gradients (normalize_row_backward of device/norm_ops.hpp):
// dx, and when dw is given the row's terms added to dw (and db, when given), in two
// SIMD loops (the sums of g*w and g*w*(x-m); then the writes) while the row stays
// in L1; five Eigen passes over the row were slower (bench/RESULTS.md, the norms).
template <class T>
void norm_backward_row(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                       std::int64_t r, std::int64_t cols, bool rms) {
  const T* xr = x + r * cols;
  const T* gr = g + r * cols;
  T* dxr = dx + r * cols;
  const T m = mean[r], s = rstd[r];
  T sum_gw = T(0), sum_gwx = T(0);
  SHARDEX_SIMD_REDUCE(sum_gw, sum_gwx)
  for (std::int64_t c = 0; c < cols; ++c) {
    const T gw = gr[c] * w[c];
    sum_gw += gw;
    sum_gwx += gw * (xr[c] - m);
  }
  const T a = rms ? T(0) : sum_gw / static_cast<T>(cols);
  const T b = sum_gwx * s / static_cast<T>(cols);
  if (!dw) {
    SHARDEX_SIMD
    for (std::int64_t c = 0; c < cols; ++c) dxr[c] = s * (gr[c] * w[c] - a - (xr[c] - m) * s * b);
  } else if (!db) {
    SHARDEX_SIMD
    for (std::int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - m) * s;
      dxr[c] = s * (gr[c] * w[c] - a - xhat * b);
      dw[c] += gr[c] * xhat;
    }
  } else {
    SHARDEX_SIMD
    for (std::int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - m) * s;
      dxr[c] = s * (gr[c] * w[c] - a - xhat * b);
      dw[c] += gr[c] * xhat;
      db[c] += gr[c];
    }
  }
}

}  // namespace

template <class T>
void Host::sum_middle(const T* in, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
  // Eigen's vectorized reductions and row additions (a scalar loop into
  // memory was most of a norm's training step in bench/layers.cpp).
  const auto n = static_cast<Eigen::Index>(inner);
  for (std::int64_t o = 0; o < outer; ++o) {
    if (inner == 1) {
      out[o] = host::ConstArrayMap<T>(in + o * extent, static_cast<Eigen::Index>(extent)).sum();
      continue;
    }
    auto row = host::ArrayMap<T>(out + o * inner, n);
    row.setZero();
    for (std::int64_t j = 0; j < extent; ++j) row += host::ConstArrayMap<T>(in + (o * extent + j) * inner, n);
  }
}

template <class T>
void Host::broadcast_middle(const T* g, T* out, std::int64_t outer, std::int64_t extent, std::int64_t inner) {
  for (std::int64_t o = 0; o < outer; ++o) {
    if (inner == 1) {  // a sum over the last dim (or all): one value per row, not a copy per element
      host::ArrayMap<T>(out + o * extent, static_cast<Eigen::Index>(extent)).setConstant(g[o]);  // vectorized
      continue;
    }
    for (std::int64_t j = 0; j < extent; ++j)
      std::copy(g + o * inner, g + (o + 1) * inner, out + (o * extent + j) * inner);
  }
}

template <class T>
void Host::softmax_rows(T* s, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    auto row = host::ArrayMap<T>(s + r * cols, static_cast<Eigen::Index>(cols));
    if (cols == 0) continue;
    row = (row - row.maxCoeff()).exp();
    row /= row.sum();
  }
}

template <class T>
void Host::softmax_backward_rows(const T* p, T* dp, std::int64_t rows, std::int64_t cols, T scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto P = host::ConstArrayMap<T>(p + r * cols, static_cast<Eigen::Index>(cols));
    auto D = host::ArrayMap<T>(dp + r * cols, static_cast<Eigen::Index>(cols));
    const T dot = (D * P).sum();
    D = scale * P * (D - dot);
  }
}

template <class T>
void Host::norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t rows,
                        std::int64_t cols, T eps, bool rms) {
  if (cols == 0) {
    std::fill(mean, mean + rows, T(0));
    std::fill(rstd, rstd + rows, T(1) / std::sqrt(eps));
    return;
  }
  const auto n = static_cast<Eigen::Index>(cols);
  const auto W = host::ConstArrayMap<T>(w, n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto X = host::ConstArrayMap<T>(x + r * cols, n);
    const T m = rms ? T(0) : X.mean();
    const T v = (X - m).square().mean();  // two passes: no cancellation of E[x^2] - m^2
    mean[r] = m;
    rstd[r] = T(1) / std::sqrt(v + eps);
    auto Y = host::ArrayMap<T>(y + r * cols, n);
    if (b)
      Y = (X - m) * rstd[r] * W + host::ConstArrayMap<T>(b, n);
    else
      Y = (X - m) * rstd[r] * W;
  }
}

template <class T>
void Host::norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                               std::int64_t rows, std::int64_t cols, bool rms) {
  if (cols == 0) return;
  for (std::int64_t r = 0; r < rows; ++r)
    norm_backward_row(x, w, g, mean, rstd, dx, static_cast<T*>(nullptr), static_cast<T*>(nullptr), r, cols, rms);
}

template <class T>
void Host::norm_backward_fused(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                               std::int64_t rows, std::int64_t cols, bool rms) {
  const auto n = static_cast<Eigen::Index>(cols);
  auto DW = host::ArrayMap<T>(dw, n);
  DW.setZero();
  if (db) host::ArrayMap<T>(db, n).setZero();
  if (cols == 0) return;
  for (std::int64_t r = 0; r < rows; ++r) norm_backward_row(x, w, g, mean, rstd, dx, dw, db, r, cols, rms);
}

template <class T>
void Host::norm_backward_weight(const T* x, const T* g, const T* mean, const T* rstd, T* dw, T* db, std::int64_t rows,
                                std::int64_t cols) {
  const auto n = static_cast<Eigen::Index>(cols);
  auto DW = host::ArrayMap<T>(dw, n);
  DW.setZero();
  for (std::int64_t r = 0; r < rows; ++r)
    DW += host::ConstArrayMap<T>(g + r * cols, n) * (host::ConstArrayMap<T>(x + r * cols, n) - mean[r]) * rstd[r];
  if (!db) return;
  auto DB = host::ArrayMap<T>(db, n);
  DB.setZero();
  for (std::int64_t r = 0; r < rows; ++r) DB += host::ConstArrayMap<T>(g + r * cols, n);
}

template <class T>
void Host::causal_mask(T* scores, std::int64_t blocks, std::int64_t seq) {
  // What causal_mask_at does per element, a row at a time: no division per element.
  for (std::int64_t row = 0; row < blocks * seq; ++row)
    std::fill(scores + row * seq + row % seq + 1, scores + (row + 1) * seq, -std::numeric_limits<T>::infinity());
}

template <class T>
void Host::row_max(const T* logits, T* max, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t t = 0; t < rows; ++t)
    max[t] = cols == 0 ? -std::numeric_limits<T>::infinity()
                       : host::ConstArrayMap<T>(logits + t * cols, static_cast<Eigen::Index>(cols)).maxCoeff();
}

template <class T, class I>
void Host::sum_exp_and_target(const T* logits, const I* targets, const T* max, T* sum_exp, T* target_logit,
                              std::int64_t rows, std::int64_t cols, std::int64_t first) {
  for (std::int64_t t = 0; t < rows; ++t) {
    const T* row = logits + t * cols;
    sum_exp[t] = (host::ConstArrayMap<T>(row, static_cast<Eigen::Index>(cols)) - max[t]).exp().sum();
    const std::int64_t c = tokens::owned_row(targets[t], first, cols);
    target_logit[t] = c < 0 ? T(0) : row[c];
  }
}

template <class T, class I>
void Host::cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                  T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first) {
  for (std::int64_t t = 0; t < rows; ++t) {
    const auto n = static_cast<Eigen::Index>(cols);
    host::ArrayMap<T>(dlogits + t * cols, n) =
        (host::ConstArrayMap<T>(logits + t * cols, n) - max[t]).exp() * (scale[t] / sum_exp[t]);
    const std::int64_t c = tokens::owned_row(targets[t], first, cols);
    if (c >= 0) dlogits[t * cols + c] -= scale[t];
  }
}

#define SHARDEX_HOST_PASSES(T)                                                                                        \
  template void Host::sum_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);                          \
  template void Host::broadcast_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);                    \
  template void Host::softmax_rows<T>(T*, std::int64_t, std::int64_t);                                                \
  template void Host::softmax_backward_rows<T>(const T*, T*, std::int64_t, std::int64_t, T);                          \
  template void Host::norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t, std::int64_t, T, bool); \
  template void Host::norm_backward_input<T>(const T*, const T*, const T*, const T*, const T*, T*, std::int64_t,      \
                                             std::int64_t, bool);                                                     \
  template void Host::norm_backward_fused<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,            \
                                             std::int64_t, std::int64_t, bool);                                       \
  template void Host::norm_backward_weight<T>(const T*, const T*, const T*, const T*, T*, T*, std::int64_t,           \
                                              std::int64_t);                                                          \
  template void Host::causal_mask<T>(T*, std::int64_t, std::int64_t);                                                 \
  template void Host::row_max<T>(const T*, T*, std::int64_t, std::int64_t);
#define SHARDEX_HOST_TOKEN_PASSES(T, I)                                                                                \
  template void Host::sum_exp_and_target<T, I>(const T*, const I*, const T*, T*, T*, std::int64_t, std::int64_t,       \
                                               std::int64_t);                                                          \
  template void Host::cross_entropy_backward<T, I>(const T*, const I*, const T*, const T*, const T*, T*, std::int64_t, \
                                                   std::int64_t, std::int64_t);

SHARDEX_HOST_PASSES(float)
SHARDEX_HOST_PASSES(double)
SHARDEX_HOST_TOKEN_PASSES(float, std::int32_t)
SHARDEX_HOST_TOKEN_PASSES(float, std::int64_t)
SHARDEX_HOST_TOKEN_PASSES(double, std::int32_t)
SHARDEX_HOST_TOKEN_PASSES(double, std::int64_t)

}  // namespace shardex
