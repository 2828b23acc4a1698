// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The per-row and per-column math of layer norm and RMS norm over the
/// last dim, written once for both devices: `Host` loops over it and the Cuda
/// kernels (src/cuda/kernels.cu) call the same functions. Statistics are two
/// passes (the mean, then the squares about it), the numerically safe form.
///
/// Row r of x (rows x cols) is normalized as xhat = (x - mean) * rstd with
/// rstd = 1 / sqrt(var + eps); RMS norm takes mean = 0 and var = mean(x^2).
/// Then y = xhat * w (+ b).

#include <cstdint>

#include "shardex/core/host_device.hpp"

namespace shardex::norms {

/// The mean (0 for RMS norm) and 1 / sqrt(var + eps) of one row of `cols` values.
template <class T>
SHARDEX_HD inline void row_stats(const T* x, std::int64_t cols, T eps, bool rms, T* mean, T* rstd) {
  T m = T(0);
  if (!rms) {
    for (std::int64_t c = 0; c < cols; ++c) m += x[c];
    m = cols > 0 ? m / static_cast<T>(cols) : T(0);
  }
  T v = T(0);
  for (std::int64_t c = 0; c < cols; ++c) v += (x[c] - m) * (x[c] - m);
  v = cols > 0 ? v / static_cast<T>(cols) : T(0);
  *mean = m;
  *rstd = T(1) / math::sqrt(v + eps);
}

/// y = (x - mean) * rstd * w + b for one row (b may be null: no bias).
template <class T>
SHARDEX_HD inline void normalize_row(const T* x, const T* w, const T* b, std::int64_t cols, T mean, T rstd, T* y) {
  for (std::int64_t c = 0; c < cols; ++c) y[c] = (x[c] - mean) * rstd * w[c] + (b ? b[c] : T(0));
}

/// The gradient of one row's input: with gw = g * w and xhat as above,
/// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) for layer norm and
/// rstd * (gw - xhat * mean(gw * xhat)) for RMS norm (no mean was subtracted).
template <class T>
SHARDEX_HD inline void normalize_row_backward(const T* x, const T* w, const T* g, std::int64_t cols, T mean, T rstd,
                                              bool rms, T* dx) {
  T sum_gw = T(0), sum_gwx = T(0);
  for (std::int64_t c = 0; c < cols; ++c) {
    const T gw = g[c] * w[c];
    sum_gw += gw;
    sum_gwx += gw * (x[c] - mean) * rstd;
  }
  const T n = cols > 0 ? static_cast<T>(cols) : T(1);
  const T a = rms ? T(0) : sum_gw / n, b = sum_gwx / n;
  for (std::int64_t c = 0; c < cols; ++c) dx[c] = rstd * (g[c] * w[c] - a - (x[c] - mean) * rstd * b);
}

/// Column c of the weight's and the bias's gradients over this rank's rows:
/// dw[c] = sum over rows of g * xhat, db[c] = sum of g (db may be null).
template <class T>
SHARDEX_HD inline void weight_grad_column(const T* x, const T* g, const T* mean, const T* rstd, std::int64_t rows,
                                          std::int64_t cols, std::int64_t c, T* dw, T* db) {
  T w = T(0), b = T(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T gv = g[r * cols + c];
    w += gv * (x[r * cols + c] - mean[r]) * rstd[r];
    b += gv;
  }
  dw[c] = w;
  if (db) db[c] = b;
}

}  // namespace shardex::norms
