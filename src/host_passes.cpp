// SPDX-License-Identifier: MIT
// The host's row and reduction passes (declared in include/shardex/device/host/host.hpp),
// compiled once here for float and double at the library's optimization: vectorized
// (Eigen array expressions, loops under SHARDEX_SIMD, or loops over vector registers
// for the norms and the float exp of the softmax and cross-entropy rows), whose math is the element and
// row functions of include/shardex/device/norm_ops.hpp and token_ops.hpp that the Cuda
// kernels run (test/dist/test_layers.cpp checks the two against each other). Scalar
// loops that walked columns or called libm per element were 10-40x slower
// (bench/RESULTS.md, "The model layers").
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/host.hpp"

namespace shardex {

namespace {
// A vector register's worth of T (GCC's vector extension, which clang accepts
// too), as wide as the target's registers: a wider one would be split, and
// g++ warns (-Wpsabi) where a function returns one the target cannot hold.
#if defined(__AVX512F__)
#define SHARDEX_PACK_BYTES 64
#elif defined(__AVX__)
#define SHARDEX_PACK_BYTES 32
#else
#define SHARDEX_PACK_BYTES 16
#endif
template <class T>
struct pack_of;
template <>
struct pack_of<float> {
  typedef float type __attribute__((vector_size(SHARDEX_PACK_BYTES)));
};
template <>
struct pack_of<double> {
  typedef double type __attribute__((vector_size(SHARDEX_PACK_BYTES)));
};
template <class T>
using Pack = typename pack_of<T>::type;
template <class T>
inline constexpr std::int64_t pack_size = SHARDEX_PACK_BYTES / static_cast<std::int64_t>(sizeof(T));

template <class T>
Pack<T> load_pack(const T* p) {
  Pack<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store_pack(T* p, const Pack<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// The sum of a pack's elements, halves added to halves (a chain of one add per
// element waited on each add's latency).
template <class T>
T pack_sum(const Pack<T>& v) {
  T e[pack_size<T>];
  std::memcpy(e, &v, sizeof v);
  for (std::int64_t half = pack_size<T> / 2; half > 0; half /= 2)
    for (std::int64_t i = 0; i < half; ++i) e[i] += e[i + half];
  return e[0];
}

// The two sums over a row's columns that terms(at, s1, s2) adds to: at(p) reads
// p at the columns of the step, a Pack<T> of them or one T. Four packs of
// partial sums each, so that the adds overlap instead of each waiting on the
// one before (a loop with one accumulator ran at the add's latency).
template <class T, class Terms>
std::pair<T, T> row_sums(std::int64_t cols, Terms terms) {
  constexpr std::int64_t n = pack_size<T>;
  Pack<T> a0{}, a1{}, a2{}, a3{}, b0{}, b1{}, b2{}, b3{};
  std::int64_t c = 0;
  for (; c + 4 * n <= cols; c += 4 * n) {
    terms([c](const T* p) { return load_pack(p + c); }, a0, b0);
    terms([c](const T* p) { return load_pack(p + c + n); }, a1, b1);
    terms([c](const T* p) { return load_pack(p + c + 2 * n); }, a2, b2);
    terms([c](const T* p) { return load_pack(p + c + 3 * n); }, a3, b3);
  }
  for (; c + n <= cols; c += n) terms([c](const T* p) { return load_pack(p + c); }, a0, b0);
  T s1 = pack_sum<T>((a0 + a1) + (a2 + a3)), s2 = pack_sum<T>((b0 + b1) + (b2 + b3));
  for (; c < cols; ++c) terms([c](const T* p) { return p[c]; }, s1, s2);
  return {s1, s2};
}

// exp of a pack of floats, for the softmax's and the cross-entropy's rows (float only; double
// stays on Eigen's): Eigen's float exp ran 0.93 ns an element here, this 0.54 (bench/RESULTS.md,
// "Zeroing C before the BLAS, and a float exp of packs"). exp(x) = 2^n p(r): n = x log2(e)
// rounded to nearest, r = x - n ln(2) in two parts (Cody and Waite), p Cephes's degree-6
// polynomial for expf, 2^n added to p's exponent bits. Below -86.5, where 2^n would leave the
// normal floats, the result is 0 (exp(-inf) is 0: the causal mask's weights stay exactly zero);
// NaN stays NaN; above 88.3 it is exp(88.3), not inf (the rows' arguments are x - max <= 0).
using FloatPack = Pack<float>;
typedef std::int32_t IntPack __attribute__((vector_size(SHARDEX_PACK_BYTES)));

[[gnu::always_inline]] inline FloatPack exp_pack(const FloatPack x) {
  const FloatPack lo = FloatPack{} - 86.5f, hi = FloatPack{} + 88.3f;
  const FloatPack xc = x > lo ? (x < hi ? x : hi) : lo;  // NaN: lo, so that n converts to an int
  const FloatPack magic = FloatPack{} + 12582912.0f;     // 1.5 * 2^23: adding it rounds to an integer
  const FloatPack n = (xc * 1.44269504088896341f + magic) - magic;
  FloatPack r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  FloatPack p = FloatPack{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  const IntPack scaled = std::bit_cast<IntPack>(p) + (__builtin_convertvector(n, IntPack) << 23);
  const FloatPack e = std::bit_cast<FloatPack>(scaled);
  return x != x ? x : (x < lo ? FloatPack{} : e);
}

// out[c] = exp(x[c] - shift) * scale over a row (out may be x); returns the sum of the exps.
// With `next` (the next row, as long), that row is asked of memory a
// line (16 floats) at a time, spread over this row's loop: the exps are
// arithmetic on a row in cache, and the next row's pass then finds it in L2
// instead of waiting on memory with nothing else to do (cross-entropy over
// GPT-2's 25129 columns a rank: forward 25.5 -> 18.1 ms, bench/RESULTS.md,
// "The next row's logits asked for early").
float exp_row(const float* x, float* out, std::int64_t cols, float shift, float scale, const float* next = nullptr) {
  constexpr std::int64_t n = pack_size<float>, step = 2 * n;
  FloatPack s0{}, s1{};
  std::int64_t c = 0;
  // The next row's lines spread evenly over this row's iterations (Bresenham: `owed` counts the
  // lines due, in units of 1 / iterations), each asked for once, none past the row.
  const std::int64_t iterations = cols / step, lines = next && iterations > 0 ? (cols + 15) / 16 : 0;
  std::int64_t owed = 0, line_at = 0;
  for (; c + step <= cols; c += step) {
    if (lines > 0)
      for (owed += lines; owed >= iterations; owed -= iterations, line_at += 16)
        __builtin_prefetch(next + line_at, 0, 2);
    const FloatPack e0 = exp_pack(load_pack(x + c) - shift), e1 = exp_pack(load_pack(x + c + n) - shift);
    s0 += e0;
    s1 += e1;
    if (out) {
      store_pack(out + c, e0 * scale);
      store_pack(out + c + n, e1 * scale);
    }
  }
  float sum = pack_sum<float>(s0 + s1);
  // The last columns (fewer than two packs) a pack at a time through a buffer, so that every
  // column takes the same exp (std::exp's would keep denormals that the packs make 0).
  for (; c < cols; c += n) {
    const std::int64_t left = std::min(n, cols - c);
    float buffer[n];
    std::fill(buffer, buffer + n, shift);  // lanes past the row: not read back
    std::copy(x + c, x + c + left, buffer);
    store_pack(buffer, exp_pack(load_pack(buffer) - shift));
    for (std::int64_t i = 0; i < left; ++i) {
      sum += buffer[i];
      if (out) out[c + i] = buffer[i] * scale;
    }
  }
  return sum;
}

// Rows r0 .. r0 + Rows - 1 of the norms' gradients (normalize_row_backward of
// device/norm_ops.hpp): dx, and when dw is given the rows' terms added to dw
// (and to db, when given). Per row the sums of g*w and g*w*(x-m) while it stays
// in L1; then one pass over the columns writes every row's dx and adds the
// block's terms to dw and db once, not once per row: their loads and stores
// were most of a row's (bench/RESULTS.md, the norms).
// AddToDx: dx += the gradient (the residual stream's gradient, nn/norm.hpp) instead of dx = it.
template <int Rows, bool AddToDx, class T>
void norm_backward_rows(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                        std::int64_t r0, std::int64_t cols, bool rms) {
  const T* xr[Rows];
  const T* gr[Rows];
  T* dxr[Rows];
  T m[Rows], s[Rows], a[Rows], b[Rows];
  for (int k = 0; k < Rows; ++k) {
    const std::int64_t r = r0 + k;
    const T* xk = xr[k] = x + r * cols;
    const T* gk = gr[k] = g + r * cols;
    dxr[k] = dx + r * cols;
    const T mk = m[k] = mean[r];
    s[k] = rstd[r];
    const auto [sum_gw, sum_gwx] = row_sums<T>(cols, [xk, gk, w, mk](auto at, auto& gw_sum, auto& gwx_sum) {
      const auto gw = at(gk) * at(w);
      gw_sum += gw;
      gwx_sum += gw * (at(xk) - mk);
    });
    a[k] = rms ? T(0) : sum_gw / static_cast<T>(cols);
    b[k] = sum_gwx * s[k] / static_cast<T>(cols);
  }
  // The columns that at(p) reads and put(p, v) writes: a Pack<T> or one T.
  const auto columns = [&](auto at, auto put, auto zero) {
    auto dw_sum = zero, db_sum = zero;
    for (int k = 0; k < Rows; ++k) {
      const auto gk = at(gr[k]);
      const auto xhat = (at(xr[k]) - m[k]) * s[k];
      const auto dxk = s[k] * (gk * at(w) - a[k] - xhat * b[k]);
      if constexpr (AddToDx)
        put(dxr[k], at(dxr[k]) + dxk);
      else
        put(dxr[k], dxk);
      dw_sum += gk * xhat;
      db_sum += gk;
    }
    if (dw) put(dw, at(dw) + dw_sum);
    if (db) put(db, at(db) + db_sum);
  };
  constexpr std::int64_t n = pack_size<T>;
  std::int64_t c = 0;
  for (; c + n <= cols; c += n)
    columns([c](const T* p) { return load_pack(p + c); }, [c](T* p, const Pack<T>& v) { store_pack(p + c, v); },
            Pack<T>{});
  for (; c < cols; ++c) columns([c](const T* p) { return p[c]; }, [c](T* p, T v) { p[c] = v; }, T(0));
}

// Every row of the norms' gradients, four at a time.
template <bool AddToDx, class T>
void norm_backward_all_rows(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                            std::int64_t rows, std::int64_t cols, bool rms) {
  std::int64_t r = 0;
  for (; r + 4 <= rows; r += 4) norm_backward_rows<4, AddToDx>(x, w, g, mean, rstd, dx, dw, db, r, cols, rms);
  for (; r < rows; ++r) norm_backward_rows<1, AddToDx>(x, w, g, mean, rstd, dx, dw, db, r, cols, rms);
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
    if constexpr (std::is_same_v<T, float>) {  // the exps written and summed in one pass
      const float sum = exp_row(s + r * cols, s + r * cols, cols, row.maxCoeff(), 1.0f);
      row *= 1.0f / sum;
    } else {
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
    }
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
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m =
        rms ? T(0) : row_sums<T>(cols, [xr](auto at, auto& sum, auto&) { sum += at(xr); }).first / static_cast<T>(cols);
    // Two passes (the row is in L1): no cancellation of E[x^2] - m^2.
    const T squares = row_sums<T>(cols, [xr, m](auto at, auto& sum, auto&) {
                        const auto d = at(xr) - m;
                        sum += d * d;
                      }).first;
    const T s = T(1) / std::sqrt(squares / static_cast<T>(cols) + eps);
    mean[r] = m;
    rstd[r] = s;
    if (b) {
      SHARDEX_SIMD
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
    } else {
      SHARDEX_SIMD
      for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * s * w[c];
    }
  }
}

template <class T>
void Host::norm_backward_input(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx,
                               std::int64_t rows, std::int64_t cols, bool rms) {
  if (cols == 0) return;
  norm_backward_all_rows<false>(x, w, g, mean, rstd, dx, static_cast<T*>(nullptr), static_cast<T*>(nullptr), rows, cols,
                                rms);
}

template <class T>
void Host::norm_backward_fused(const T* x, const T* w, const T* g, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                               std::int64_t rows, std::int64_t cols, bool rms, bool add_to_dx) {
  std::fill(dw, dw + cols, T(0));
  if (db) std::fill(db, db + cols, T(0));
  if (cols == 0) return;
  if (add_to_dx)
    norm_backward_all_rows<true>(x, w, g, mean, rstd, dx, dw, db, rows, cols, rms);
  else
    norm_backward_all_rows<false>(x, w, g, mean, rstd, dx, dw, db, rows, cols, rms);
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
void Host::causal_mask(T* scores, std::int64_t blocks, std::int64_t rows, std::int64_t cols, std::int64_t first_row) {
  // What causal_mask_at does per element, a row at a time: no division per element.
  for (std::int64_t row = 0; row < blocks * rows; ++row) {
    const std::int64_t keep = std::min(cols, first_row + row % rows + 1);
    std::fill(scores + row * cols + keep, scores + (row + 1) * cols, -std::numeric_limits<T>::infinity());
  }
}

// Row by row, the maximum and the sum of exponentials while the row is in
// cache: over GPT-2's 25129 columns a rank, a pass for the maxima and
// another for the sums read the logits from memory twice (1024 rows: 29 ms
// against 17; bench/RESULTS.md, "Cross-entropy's rows read once"), and the
// next row asked for while this one's exps are summed (exp_row).
template <class T, class I>
void Host::row_max_sum_exp_and_target(const T* logits, const I* targets, T* max, T* sum_exp, T* target_logit,
                                      std::int64_t rows, std::int64_t cols, std::int64_t first) {
  for (std::int64_t t = 0; t < rows; ++t) {
    const T* row = logits + t * cols;
    const host::ConstArrayMap<T> x(row, static_cast<Eigen::Index>(cols));
    max[t] = cols == 0 ? -std::numeric_limits<T>::infinity() : x.maxCoeff();
    if constexpr (std::is_same_v<T, float>)
      sum_exp[t] = exp_row(row, nullptr, cols, max[t], 1.0f, t + 1 < rows ? row + cols : nullptr);
    else
      sum_exp[t] = cols == 0 ? T(0) : (x - max[t]).exp().sum();
    const std::int64_t c = tokens::owned_row(targets[t], first, cols);
    target_logit[t] = c < 0 ? T(0) : row[c];
  }
}

template <class T>
void Host::rescale_sum_exp(T* sum_exp, const T* local_max, const T* global_max, std::int64_t rows) {
  for (std::int64_t t = 0; t < rows; ++t)
    sum_exp[t] = tokens::rescaled_sum_exp(sum_exp[t], local_max[t], global_max[t]);
}

template <class T, class I>
void Host::cross_entropy_backward(const T* logits, const I* targets, const T* max, const T* sum_exp, const T* scale,
                                  T* dlogits, std::int64_t rows, std::int64_t cols, std::int64_t first) {
  for (std::int64_t t = 0; t < rows; ++t) {
    if constexpr (std::is_same_v<T, float>) {
      exp_row(logits + t * cols, dlogits + t * cols, cols, max[t], scale[t] / sum_exp[t],
              t + 1 < rows ? logits + (t + 1) * cols : nullptr);
    } else {
      const auto n = static_cast<Eigen::Index>(cols);
      host::ArrayMap<T>(dlogits + t * cols, n) =
          (host::ConstArrayMap<T>(logits + t * cols, n) - max[t]).exp() * (scale[t] / sum_exp[t]);
    }
    const std::int64_t c = tokens::owned_row(targets[t], first, cols);
    if (c >= 0) dlogits[t * cols + c] -= scale[t];
  }
}

// One Adam step, vectorized: the library is compiled with -fno-math-errno
// (src/meson.build), without which the sqrt of each element keeps its errno
// branch and the loop stays scalar (2.3x slower here, bench/RESULTS.md). The
// pass streams four arrays from memory, and one core alone waits on their
// lines: each array's line 2 KiB ahead is asked for in blocks of four lines
// (7 % faster than the hardware's prefetcher alone, bench/RESULTS.md,
// "AdamW's prefetches").
template <class T>
void Host::adam_update(T* p, T* m, T* v, T* g, std::int64_t n, const optim::AdamStep& s) {
  const optim::AdamTerms<T> k(s);
  constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T)), block = 4 * line, ahead = 32 * line;
  const auto pass = [&](auto update) {
    for (std::int64_t i0 = 0; i0 < n; i0 += block) {
      const std::int64_t end = std::min(n, i0 + block);
      for (std::int64_t j = i0 + ahead, last = std::min(n, end + ahead); j < last; j += line) {
        __builtin_prefetch(p + j, 0, 2), __builtin_prefetch(m + j, 0, 2);  // (2: into L2, as _MM_HINT_T1)
        __builtin_prefetch(v + j, 0, 2), __builtin_prefetch(g + j, 0, 2);
      }
      SHARDEX_SIMD
      for (std::int64_t i = i0; i < end; ++i) update(i);
    }
  };
  if (s.clear_grad)
    pass([&](std::int64_t i) { optim::adam_update_clearing_at(p, m, v, g, i, k); });
  else
    pass([&](std::int64_t i) { optim::adam_update_at(p, m, v, g, i, k); });
}

#define SHARDEX_HOST_PASSES(T)                                                                                        \
  template void Host::adam_update<T>(T*, T*, T*, T*, std::int64_t, const optim::AdamStep&);                           \
  template void Host::sum_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);                          \
  template void Host::broadcast_middle<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);                    \
  template void Host::softmax_rows<T>(T*, std::int64_t, std::int64_t);                                                \
  template void Host::softmax_backward_rows<T>(const T*, T*, std::int64_t, std::int64_t, T);                          \
  template void Host::norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t, std::int64_t, T, bool); \
  template void Host::norm_backward_input<T>(const T*, const T*, const T*, const T*, const T*, T*, std::int64_t,      \
                                             std::int64_t, bool);                                                     \
  template void Host::norm_backward_fused<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,            \
                                             std::int64_t, std::int64_t, bool, bool);                                 \
  template void Host::norm_backward_weight<T>(const T*, const T*, const T*, const T*, T*, T*, std::int64_t,           \
                                              std::int64_t);                                                          \
  template void Host::causal_mask<T>(T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t);                     \
  template void Host::rescale_sum_exp<T>(T*, const T*, const T*, std::int64_t);
#define SHARDEX_HOST_TOKEN_PASSES(T, I)                                                                                \
  template void Host::row_max_sum_exp_and_target<T, I>(const T*, const I*, T*, T*, T*, std::int64_t, std::int64_t,     \
                                                       std::int64_t);                                                  \
  template void Host::cross_entropy_backward<T, I>(const T*, const I*, const T*, const T*, const T*, T*, std::int64_t, \
                                                   std::int64_t, std::int64_t);

SHARDEX_HOST_PASSES(float)
SHARDEX_HOST_PASSES(double)
SHARDEX_HOST_TOKEN_PASSES(float, std::int32_t)
SHARDEX_HOST_TOKEN_PASSES(float, std::int64_t)
SHARDEX_HOST_TOKEN_PASSES(double, std::int32_t)
SHARDEX_HOST_TOKEN_PASSES(double, std::int64_t)

}  // namespace shardex
