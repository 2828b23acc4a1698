// SPDX-License-Identifier: MIT
// shardex's own float GEMM kernel (src/host_own_gemm.hpp), for the products a
// transformer makes with few rows: at 4 x 64 tokens GPT-2 small's forward
// multiplies 256 rows by weights read from memory at every step, where
// Eigen's and OpenBLAS's kernels ran 122-148 GFLOP/s against 150-165 in cache
// (bench/RESULTS.md, "shardex's own kernel"). What it does differently:
// - the next 48 columns of op(B) (the weights) are prefetched, a slice during
//   each 8-row pass over the current ones, so that packing them finds them in
//   cache instead of waiting on memory;
// - k runs in blocks of up to 768, so C is written once per block, from
//   registers: not zeroed first and read again, as a kernel that accumulates
//   into C does (a step's outputs are new, cold memory);
// - op(A) is packed once per block into 8-row panels, op(B) into 48-column
//   panels (both transposed by 16 x 16 register tiles where they are stored
//   the other way), and an 8 x 48 tile of C lives in 24 AVX-512 registers;
// - products of at most 256 columns and 1024 deep (attention's heads) take a
//   path of their own, below (small_product).
// AVX-512F only (checked at run time); float only; one thread.
#include "host_own_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>

#if defined(__x86_64__)
// GCC 12 takes the intrinsics' deliberately undefined start values
// (_mm512_undefined_ps) for uninitialized reads in functions compiled for
// AVX-512 by attribute: a false warning, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace shardex::host::detail {

#if defined(__x86_64__)

namespace {

using I = std::int64_t;
constexpr int MR = 8;           // rows of a C tile (and of an op(A) panel)
constexpr int NR = 48;          // columns of a C tile: three 16-float registers
constexpr I KC = 768;           // k per block: an op(B) panel of 144 KiB, kept in L2
constexpr I A_BLOCK = 1 << 18;  // floats of packed op(A) per block (1 MiB)
constexpr I SMALL_N = 256;      // the widest op(B) the small path takes
constexpr I SMALL_K = 1024;     // the deepest (op(B) at most 1 MiB)
constexpr int SMALL_MR = 4;

#define SHARDEX_AVX512 __attribute__((target("avx512f")))

// The first `n` of 16 lanes (n may be <= 0 or >= 16).
SHARDEX_AVX512 inline __mmask16 lanes(I n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// out[t] = column t of the 16 x 16 tile at src (row i at src + i * ld); rows
// from `rows` on and columns from `cols` on read as zero.
SHARDEX_AVX512 inline void transpose16(const float* src, I ld, I rows, I cols, __m512 out[16]) {
  const __mmask16 cm = lanes(cols);
  __m512 r[16], t[16], u[16], v[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * ld) : _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // u[4q + s]: in each 128-bit lane L, column 4L + s of rows 4q .. 4q + 3
    u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int s = 0; s < 4; ++s) {
    v[s] = _mm512_shuffle_f32x4(u[s], u[4 + s], 0x88);
    v[s + 4] = _mm512_shuffle_f32x4(u[s], u[4 + s], 0xDD);
    v[s + 8] = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0x88);
    v[s + 12] = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], 0xDD);
  }
  for (int s = 0; s < 4; ++s) {
    out[s] = _mm512_shuffle_f32x4(v[s], v[s + 8], 0x88);
    out[8 + s] = _mm512_shuffle_f32x4(v[s], v[s + 8], 0xDD);
    out[4 + s] = _mm512_shuffle_f32x4(v[s + 4], v[s + 12], 0x88);
    out[12 + s] = _mm512_shuffle_f32x4(v[s + 4], v[s + 12], 0xDD);
  }
}

// op(A)[i0 .. i0 + mc, k0 .. k0 + kc] into 8-row panels, k-major
// (ap[p * kc * 8 + kk * 8 + r]); rows past m are zero.
SHARDEX_AVX512 void pack_a(const float* a, I lda, bool ta, I m, I i0, I mc, I k0, I kc, float* ap) {
  const I panels = (mc + MR - 1) / MR;
  if (ta) {  // op(A)[i, kk] = a[kk * lda + i]: a panel's 8 values are contiguous
    for (I p = 0; p < panels; ++p) {
      const I i = i0 + p * MR;
      const __mmask16 mk = lanes(std::min<I>(MR, m - i));
      for (I kk = 0; kk < kc; ++kk)
        _mm256_storeu_ps(ap + (p * kc + kk) * MR,
                         _mm512_castps512_ps256(_mm512_maskz_loadu_ps(mk, a + (k0 + kk) * lda + i)));
    }
    return;
  }
  for (I p = 0; p < panels; p += 2) {  // two panels (16 rows) per 16 x 16 transposition
    const I i = i0 + p * MR, rows = std::min<I>(16, m - i);
    for (I kk = 0; kk < kc; kk += 16) {
      const I cols = std::min<I>(16, kc - kk);
      __m512 col[16];
      transpose16(a + i * lda + k0 + kk, lda, rows, cols, col);
      for (I t = 0; t < cols; ++t) {
        _mm256_storeu_ps(ap + (p * kc + kk + t) * MR, _mm512_castps512_ps256(col[t]));
        if (p + 1 < panels)
          _mm256_storeu_ps(ap + ((p + 1) * kc + kk + t) * MR,
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(col[t]), 1)));
      }
    }
  }
}

// op(B)[k0 .. k0 + kc, j .. j + 48] into bp[kk * 48 + c]; columns past n are zero.
SHARDEX_AVX512 void pack_b(const float* b, I ldb, bool tb, I n, I k0, I kc, I j, float* bp) {
  const I cols = std::min<I>(NR, n - j);
  if (!tb) {  // op(B)[kk, c] = b[kk * ldb + c]: rows of 48 contiguous values
    const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16), m2 = lanes(cols - 32);
    for (I kk = 0; kk < kc; ++kk) {
      const float* s = b + (k0 + kk) * ldb + j;
      _mm512_store_ps(bp + kk * NR, _mm512_maskz_loadu_ps(m0, s));
      _mm512_store_ps(bp + kk * NR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      _mm512_store_ps(bp + kk * NR + 32, _mm512_maskz_loadu_ps(m2, s + 32));
    }
    return;
  }
  for (int q = 0; q < 3; ++q) {  // op(B)[kk, c] = b[(j + c) * ldb + kk]: 16 rows of b at a time, transposed
    const I rows = std::clamp<I>(cols - 16 * q, 0, 16);
    for (I kk = 0; kk < kc; kk += 16) {
      const I kn = std::min<I>(16, kc - kk);
      __m512 col[16];
      transpose16(b + (j + 16 * q) * ldb + k0 + kk, ldb, rows, kn, col);
      for (I t = 0; t < kn; ++t) _mm512_store_ps(bp + (kk + t) * NR + 16 * q, col[t]);
    }
  }
}

// Prefetches part `part` of `parts` of what pack_b will read for the panel at column j.
SHARDEX_AVX512 inline void prefetch_b(const float* b, I ldb, bool tb, I n, I k0, I kc, I j, I part, I parts) {
  if (j >= n) return;
  const I cols = std::min<I>(NR, n - j);
  if (!tb) {
    for (I kk = kc * part / parts, end = kc * (part + 1) / parts; kk < end; ++kk)
      for (I c = 0; c < cols; c += 16)
        _mm_prefetch(reinterpret_cast<const char*>(b + (k0 + kk) * ldb + j + c), _MM_HINT_T1);
    return;
  }
  const I lines = (kc + 15) / 16, total = cols * lines;
  for (I x = total * part / parts, end = total * (part + 1) / parts; x < end; ++x)
    _mm_prefetch(reinterpret_cast<const char*>(b + (j + x / lines) * ldb + k0 + (x % lines) * 16), _MM_HINT_T1);
}

// The C tile of `rows` x `cols` (at most 8 x 48) at c = alpha * (panel products) + beta * C (C unread at beta 0).
SHARDEX_AVX512 void tile(const float* __restrict ap, const float* __restrict bp, I kc, float* c, I ldc, I rows, I cols,
                         float alpha, float beta) {
  __m512 acc[MR][3];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = acc[r][2] = _mm512_setzero_ps();
  for (I kk = 0; kk < kc; ++kk) {
    const __m512 b0 = _mm512_load_ps(bp + kk * NR), b1 = _mm512_load_ps(bp + kk * NR + 16),
                 b2 = _mm512_load_ps(bp + kk * NR + 32);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[kk * MR + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 mk[3] = {lanes(cols), lanes(cols - 16), lanes(cols - 32)};
  for (I r = 0; r < rows; ++r)
    for (int q = 0; q < 3; ++q) {
      float* cp = c + r * ldc + 16 * q;
      __m512 v = _mm512_mul_ps(va, acc[r][q]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[q], cp), v);
      _mm512_mask_storeu_ps(cp, mk[q], v);
    }
}

// The packing buffers of a thread: op(A)'s panels and the small products'
// rows of op(B), grown as needed, and one op(B) panel.
struct Buffers {
  float* a = nullptr;
  I a_floats = 0;
  float* b = nullptr;
  float* small_b = nullptr;
  I small_b_floats = 0;
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    std::free(a);
    std::free(b);
    std::free(small_b);
  }
  static float* grown(float*& p, I& have, I floats) {
    if (floats > have) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((floats + 15) / 16 * 64)));
      have = p == nullptr ? 0 : floats;
      if (p == nullptr) throw std::bad_alloc();
    }
    return p;
  }
  float* panel_a(I floats) { return grown(a, a_floats, floats); }
  float* rows_b(I floats) { return grown(small_b, small_b_floats, floats); }
  float* panel_b() {
    if (b == nullptr) b = static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>(KC * NR) * 4));
    if (b == nullptr) throw std::bad_alloc();
    return b;
  }
};

// Small products (attention's heads, include/shardex/nn/causal_attention.hpp:
// 64 x 64 x 64 in GPT-2 small's step at 4 x 64, up to 256 keys at 4 x 256),
// where packing op(A) and 48-column panels of op(B) cost as much as the
// arithmetic and a panel of 48 wastes a third of its tile at n = 64: op(B) is copied once into rows of n (padded to
// 16; transposed by 16 x 16 tiles where stored the other way), op(A) is read
// in place one value at a time, and a 4 x 64 tile of C lives in 16 registers.

// op(B)[0 .. k, 0 .. n] into bp[kk * np + c], np = n rounded up to 16, zero past n.
SHARDEX_AVX512 void pack_b_rows(const float* b, I ldb, bool tb, I n, I k, I np, float* bp) {
  if (!tb) {
    for (I kk = 0; kk < k; ++kk)
      for (I c = 0; c < np; c += 16)
        _mm512_store_ps(bp + kk * np + c, _mm512_maskz_loadu_ps(lanes(n - c), b + kk * ldb + c));
    return;
  }
  for (I c = 0; c < np; c += 16)  // op(B)[kk, c] = b[c * ldb + kk]: 16 rows of b at a time, transposed
    for (I kk = 0; kk < k; kk += 16) {
      const I kn = std::min<I>(16, k - kk);
      __m512 col[16];
      transpose16(b + c * ldb + kk, ldb, std::min<I>(16, n - c), kn, col);
      for (I t = 0; t < kn; ++t) _mm512_store_ps(bp + (kk + t) * np + c, col[t]);
    }
}

// C[i0 .. i0 + rows, j .. j + cols] (rows <= 4, cols <= 16 NV) = alpha op(A) bp + beta C.
template <int NV>
SHARDEX_AVX512 void small_tile(const float* a, I lda, bool ta, I i0, I rows, I k, const float* __restrict bp, I np,
                               float* c, I ldc, I cols, float alpha, float beta) {
  __m512 acc[SMALL_MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < SMALL_MR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) acc[r][q] = _mm512_setzero_ps();
  // Row r's op(A)[i0 + r, kk] at ar[r] + kk * as; a row past m reads row i0's (its sums are not stored).
  const I as = ta ? lda : 1, rs = ta ? 1 : lda;
  const float* ar[SMALL_MR];
#pragma GCC unroll 8
  for (int r = 0; r < SMALL_MR; ++r) ar[r] = a + (i0 + (r < rows ? r : 0)) * rs;
  for (I kk = 0; kk < k; ++kk, bp += np) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) bv[q] = _mm512_load_ps(bp + 16 * q);
#pragma GCC unroll 8
    for (int r = 0; r < SMALL_MR; ++r) {
      const __m512 av = _mm512_set1_ps(ar[r][kk * as]);
#pragma GCC unroll 4
      for (int q = 0; q < NV; ++q) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (I r = 0; r < rows; ++r)
    for (int q = 0; q < NV; ++q) {
      const __mmask16 mk = lanes(cols - 16 * q);
      float* cp = c + (i0 + r) * ldc + 16 * q;
      __m512 v = _mm512_mul_ps(va, acc[r][q]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, cp), v);
      _mm512_mask_storeu_ps(cp, mk, v);
    }
}

SHARDEX_AVX512 void small_product(I m, I n, I k, bool ta, bool tb, const float* a, I lda, const float* b, I ldb,
                                  float* c, I ldc, float alpha, float beta, Buffers& buffers) {
  const I np = (n + 15) / 16 * 16;
  float* bp = buffers.rows_b(k * np);
  pack_b_rows(b, ldb, tb, n, k, np, bp);
  for (I j = 0; j < n; j += 64) {
    const I cols = std::min<I>(64, n - j);
    for (I i = 0; i < m; i += SMALL_MR) {
      const I rows = std::min<I>(SMALL_MR, m - i);
      float* cj = c + j;
      switch ((cols + 15) / 16) {
        case 1:
          small_tile<1>(a, lda, ta, i, rows, k, bp + j, np, cj, ldc, cols, alpha, beta);
          break;
        case 2:
          small_tile<2>(a, lda, ta, i, rows, k, bp + j, np, cj, ldc, cols, alpha, beta);
          break;
        case 3:
          small_tile<3>(a, lda, ta, i, rows, k, bp + j, np, cj, ldc, cols, alpha, beta);
          break;
        default:
          small_tile<4>(a, lda, ta, i, rows, k, bp + j, np, cj, ldc, cols, alpha, beta);
          break;
      }
    }
  }
}

SHARDEX_AVX512 void one_product(I m, I n, I k, bool ta, bool tb, const float* a, I lda, const float* b, I ldb, float* c,
                                I ldc, float alpha, float beta) {
  if (k == 0 || alpha == 0.0f) {  // C = beta C, A and B unread
    for (I i = 0; i < m; ++i)
      for (I j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  static thread_local Buffers buffers;
  if (n <= SMALL_N && k <= SMALL_K) {
    small_product(m, n, k, ta, tb, a, lda, b, ldb, c, ldc, alpha, beta, buffers);
    return;
  }
  float* bp = buffers.panel_b();
  for (I k0 = 0; k0 < k; k0 += KC) {
    const I kc = std::min(KC, k - k0);
    const float beta_here = k0 == 0 ? beta : 1.0f;  // later blocks add to the first's C
    const I mc_max = std::max<I>(MR, A_BLOCK / kc / MR * MR);
    for (I i0 = 0; i0 < m; i0 += mc_max) {
      const I mc = std::min(mc_max, m - i0), panels = (mc + MR - 1) / MR;
      float* ap = buffers.panel_a(panels * MR * kc);
      pack_a(a, lda, ta, m, i0, mc, k0, kc, ap);
      for (I j = 0; j < n; j += NR) {
        pack_b(b, ldb, tb, n, k0, kc, j, bp);
        for (I p = 0; p < panels; ++p) {
          prefetch_b(b, ldb, tb, n, k0, kc, j + NR, p, panels);
          tile(ap + p * kc * MR, bp, kc, c + (i0 + p * MR) * ldc + j, ldc, std::min<I>(MR, m - i0 - p * MR),
               std::min<I>(NR, n - j), alpha, beta_here);
        }
      }
    }
  }
}

}  // namespace

bool own_gemm_available() noexcept {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return available;
}

void own_gemm(const GemmShape& g, float alpha, const float* a, const float* b, float beta, float* c) {
  for (std::int64_t e = 0; e < g.batch; ++e)
    one_product(g.m, g.n, g.k, g.ta, g.tb, a + e * g.stride_a, g.lda, b + e * g.stride_b, g.ldb, c + e * g.stride_c,
                g.ldc, alpha, beta);
}

#else  // not x86-64: the kernel is not there, and never chosen (src/host_gemm.cpp asks own_gemm_available)

bool own_gemm_available() noexcept { return false; }

void own_gemm(const GemmShape&, float, const float*, const float*, float, float*) {
  throw std::logic_error("shardex: the own GEMM kernel needs x86-64 with AVX-512F");
}

#endif

}  // namespace shardex::host::detail
