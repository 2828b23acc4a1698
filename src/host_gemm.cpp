// SPDX-License-Identifier: MIT
// Host::gemm and the choice of its kernel per shape class
// (include/shardex/device/host/gemm_kernels.hpp): Eigen's product, the BLAS's
// (SHARDEX_WITH_BLAS), shardex's own (src/host_own_gemm.cpp: float, AVX-512F),
// a short timing of each per class, and the table.
#include "shardex/device/host/gemm_kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shardex/config.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/core/error.hpp"
#include "shardex/device/host/eigen.hpp"
#include "shardex/device/host/host.hpp"

#include "host_own_gemm.hpp"

#if SHARDEX_WITH_BLAS
#include <cblas.h>
#endif

#if SHARDEX_WITH_BLAS
// OpenBLAS's dynamic-architecture entry points (correct_blas_core below).
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}
#endif

namespace shardex {

namespace {

template <class T>
void eigen_gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const auto ix = [](std::int64_t v) { return static_cast<Eigen::Index>(v); };
  // Eigen reads its thread count at each product (it takes effect with OpenMP).
  Eigen::setNbThreads(host::threads());
  for (std::int64_t i = 0; i < g.batch; ++i) {
    Eigen::Map<M, 0, Stride> C(c + i * g.stride_c, ix(g.m), ix(g.n), Stride(ix(g.ldc)));
    if (beta == T(0))
      C.setZero();
    else if (beta != T(1))
      C *= beta;
    if (g.k == 0) continue;
    Eigen::Map<const M, 0, Stride> A(a + i * g.stride_a, ix(g.ta ? g.k : g.m), ix(g.ta ? g.m : g.k), Stride(ix(g.lda)));
    Eigen::Map<const M, 0, Stride> B(b + i * g.stride_b, ix(g.tb ? g.n : g.k), ix(g.tb ? g.k : g.n), Stride(ix(g.ldb)));
    if (g.ta && g.tb)
      C.noalias() += alpha * A.transpose() * B.transpose();
    else if (g.ta)
      C.noalias() += alpha * A.transpose() * B;
    else if (g.tb)
      C.noalias() += alpha * A * B.transpose();
    else
      C.noalias() += alpha * A * B;
  }
}

#if SHARDEX_WITH_BLAS
std::string& blas_core_note() {
  static std::string note;
  return note;
}

// OpenBLAS built for many CPUs (DYNAMIC_ARCH, as Debian's is) picks its kernels
// by the CPU's model at load, and takes Prescott's (SSE3) for a model it does
// not know, as a virtual machine's often is ("Intel(R) Xeon(R) Processor"):
// 32 GFLOP/s there against 145 with its SkylakeX kernels (bench/RESULTS.md,
// "OpenBLAS on a CPU it does not know"). Where the user named no core
// (OPENBLAS_CORETYPE) and OpenBLAS fell back to Prescott on an x86 CPU with
// AVX-512 or AVX2, the kernels are chosen again as OpenBLAS chooses a named
// core, through its dynamic-architecture entry points (weak: a single-CPU
// build lacks them). mpi::Environment does it first, before MPI_Init starts
// threads: the variable is set for OpenBLAS's reading only, and the kernel
// table is empty for the moment between the two calls.
void correct_blas_core() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__x86_64__) || defined(__i386__)
    const std::string found = openblas_get_corename();
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr || found != "Prescott") return;
    if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) {
      blas_core_note() = " (OpenBLAS's fallback; left: this OpenBLAS cannot choose its kernels again)";
      return;
    }
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512cd");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    // The widest first; OpenBLAS maps a core its build lacks to another, so each is checked.
    for (const char* core : {avx512 ? "SkylakeX" : nullptr, avx2 ? "Haswell" : nullptr}) {
      if (core == nullptr) continue;
      ::setenv("OPENBLAS_CORETYPE", core, 1);
      gotoblas_dynamic_quit();
      gotoblas_dynamic_init();
      ::unsetenv("OPENBLAS_CORETYPE");
      if (std::string(openblas_get_corename()) != found) {
        blas_core_note() = " (OpenBLAS took " + found + ", its fallback for a CPU it does not know; shardex chose " +
                           openblas_get_corename() + " for this CPU's " +
                           (std::string_view(core) == "SkylakeX" ? "AVX-512" : "AVX2") + ")";
        return;
      }
    }
    if (avx512 || avx2)
      blas_core_note() = " (OpenBLAS's fallback; left: this OpenBLAS has no kernels for the CPU's AVX)";
#endif
  });
}

// OpenBLAS starts as many threads as cores; a rank uses host::threads() (one
// by default, one rank per core), set again only when it changes.
void blas_threads() {
  correct_blas_core();
  static std::atomic<int> set{0};
  const int want = host::threads();
  if (set.exchange(want, std::memory_order_relaxed) != want) openblas_set_num_threads(want);
}

template <class T>
void blas_gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  blas_threads();
  const auto ta = g.ta ? CblasTrans : CblasNoTrans;
  const auto tb = g.tb ? CblasTrans : CblasNoTrans;
  const auto i32 = [](std::int64_t v) { return static_cast<blasint>(v); };
  for (std::int64_t i = 0; i < g.batch; ++i) {
    T* ci = c + i * g.stride_c;
    if (g.k == 0) {  // C = beta C (a BLAS may read A and B even then)
      for (std::int64_t r = 0; r < g.m; ++r) {
        T* row = ci + r * g.ldc;
        for (std::int64_t j = 0; j < g.n; ++j) row[j] = beta == T(0) ? T(0) : beta * row[j];
      }
      continue;
    }
    // beta 0: C zeroed here with memset and the product added (beta 1): the same values (0 + the
    // sum, as after the BLAS's own zeroing pass), sooner; on a Zen 2 attention's 64-row products 3-33 %
    // faster, the large ones within noise (bench/RESULTS.md, "Zeroing C before the BLAS, and a float exp of packs").
    T beta_blas = beta;
    if (beta == T(0)) {
      if (g.ldc == g.n)
        std::memset(ci, 0, sizeof(T) * static_cast<std::size_t>(g.m * g.n));
      else
        for (std::int64_t r = 0; r < g.m; ++r)
          std::memset(ci + r * g.ldc, 0, sizeof(T) * static_cast<std::size_t>(g.n));
      beta_blas = T(1);
    }
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, ta, tb, i32(g.m), i32(g.n), i32(g.k), alpha, a + i * g.stride_a, i32(g.lda),
                  b + i * g.stride_b, i32(g.ldb), beta_blas, ci, i32(g.ldc));
    else
      cblas_dgemm(CblasRowMajor, ta, tb, i32(g.m), i32(g.n), i32(g.k), alpha, a + i * g.stride_a, i32(g.lda),
                  b + i * g.stride_b, i32(g.ldb), beta_blas, ci, i32(g.ldc));
  }
}
#endif

template <class T>
void run_kernel(host::GemmKernel k, const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    if (k == host::GemmKernel::own && host::detail::own_gemm_available()) {
      host::detail::own_gemm(g, alpha, a, b, beta, c);
      return;
    }
  }
#if SHARDEX_WITH_BLAS
  // A BLAS takes 32-bit sizes: a larger product stays on Eigen.
  constexpr std::int64_t int_max = 2147483647;
  if (k == host::GemmKernel::blas && std::max({g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) <= int_max) {
    blas_gemm(g, alpha, a, b, beta, c);
    return;
  }
#else
  (void)k;
#endif
  eigen_gemm(g, alpha, a, b, beta, c);
}

// The classes: element type x transposition x size, the size by the geometric
// mean of m, n, k (small below 48, medium below 160, large below 320, huge
// above), each timed on a cube of its size: the huge class is a model's
// products (GPT-2 small's are 420-1700 by that mean), which 192^3 stood for
// before (bench/RESULTS.md, "The GEMM classes").
constexpr int n_types = 2, n_trans = 4, n_sizes = 4;
constexpr int n_classes = n_types * n_trans * n_sizes;
constexpr int n_kernels = 3;  // eigen, blas, own: the values of host::GemmKernel
constexpr std::size_t n_times = static_cast<std::size_t>(n_kernels * n_classes);
constexpr std::array<std::int64_t, n_sizes> cube = {32, 96, 192, 384};
constexpr std::array<int, n_sizes> repeats = {16, 4, 2, 2};
constexpr std::array<const char*, n_sizes> size_names = {"small", "medium", "large", "huge"};

/// The flops the counters credit a product with: 2 m n k per batch entry.
double product_flops(const GemmShape& g) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
         static_cast<double>(g.batch);
}

int size_class(const GemmShape& g) {
  const double mean = std::cbrt(static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k));
  return mean < 48 ? 0 : mean < 160 ? 1 : mean < 320 ? 2 : 3;
}
int class_of(int type, bool ta, bool tb, int size) {
  return (type * n_trans + (ta ? 2 : 0) + (tb ? 1 : 0)) * n_sizes + size;
}
int type_of_class(int cls) { return cls / (n_trans * n_sizes); }
// Where a class's time (or rate) of kernel k is kept: n_kernels per class.
std::size_t at(int cls, int k) { return static_cast<std::size_t>(n_kernels * cls + k); }
// Whether kernel k competes for class cls (is timed, tuned, chosen): one that
// runs the class's element type, shardex's for the NN and NT classes and the
// small and medium ones of every transposition. It runs any transposition
// (gemm_with), but in GPT-2 small's step its large NT and TN products, chosen
// from the tuning steps' rates, made the backward 5-8 % slower than
// OpenBLAS's (bench/RESULTS.md, "shardex's own kernel"), the TN ones the
// slower; on an Ice Lake its NT products ran 10-15 % faster than OpenBLAS's
// and the step came 4 % nearer its floor ("On an Intel Ice Lake"), so it
// competes for NT, and the tuning keeps OpenBLAS's where that is faster. Its
// small products (attention's heads) skip the packing that costs the others
// most there ("Attention's small products"). The path is the shape's, the choice the
// class's: a small or medium product deeper than 1024 or wider than 256
// takes the panels' path, a large NN one of at most 256 columns the small
// one; the tuning times them as they run.
bool candidate(int k, int cls) {
  const auto kernel = static_cast<host::GemmKernel>(k);
  const bool a_transposed = (cls / n_sizes) % n_trans >= 2, small = cls % n_sizes <= 1;  // TN or TT
  return host::kernel_available(kernel, type_of_class(cls) == 0 ? 4 : 8) &&
         (kernel != host::GemmKernel::own || !a_transposed || small);
}
// Whether the start-up timing times kernel k on class cls: a candidate of a
// class that has another (a class with one runs it untimed).
bool timed_at_start(int k, int cls) {
  int candidates = 0;
  for (int other = 0; other < n_kernels; ++other) candidates += candidate(other, cls) ? 1 : 0;
  return candidates >= 2 && candidate(k, cls);
}

struct Choice {
  bool made = false;
  bool measured = false;  // false: SHARDEX_GEMM named the kernel
  std::array<host::GemmKernel, n_classes> kernel{};
  std::array<std::int64_t, n_times> ns{};      // per class and kernel (at()): the time, summed over the ranks; 0: none
  std::int64_t ranks = 1;                      // the ranks whose times ns sums
  bool from_cache = false;                     // the times came from the cache file
  int tuned_steps = 0;                         // tune_gemm_kernels' steps (0: not tuned)
  std::array<double, n_times> tuned_gflops{};  // per class and kernel: the rate in the steps, per rank (0: none)
};

// tune_gemm_kernels' state: the kernel every Host::gemm runs for the moment
// (-1: the choice), and per class and kernel the products' time and flops
// (integers: summed over the ranks exactly).
struct Tuning {
  std::atomic<int> forced{-1};
  std::array<std::int64_t, n_times> ns{}, flops{};
};
Tuning& tuning() {
  static Tuning t;
  return t;
}

std::mutex& choice_mutex() {
  static std::mutex m;
  return m;
}
Choice& choice() {
  static Choice c;
  return c;
}

template <class T>
std::int64_t time_kernel(host::GemmKernel k, std::int64_t s, bool ta, bool tb, int reps) {
  std::vector<T> a(static_cast<std::size_t>(s * s)), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<T>((i % 7) * 0.25 - 0.75);
    b[i] = static_cast<T>((i % 5) * 0.5 - 1.0);
  }
  const GemmShape g = GemmShape::plain(s, s, s, ta, tb);
  run_kernel(k, g, T(1), a.data(), b.data(), T(0), c.data());  // warm: caches, a BLAS's threads
  std::int64_t best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run_kernel(k, g, T(1), a.data(), b.data(), T(0), c.data());
    const auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    best = r == 0 ? t : std::min(best, static_cast<std::int64_t>(t));
  }
  return std::max<std::int64_t>(best, 1);
}

// What SHARDEX_GEMM asks for: nullopt-like -1 for auto.
int requested_kernel() {
  const char* v = std::getenv("SHARDEX_GEMM");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "auto") return -1;
  if (std::string_view(v) == "eigen") return static_cast<int>(host::GemmKernel::eigen);
  if (std::string_view(v) == "blas" || std::string_view(v) == host::kernel_name(host::GemmKernel::blas)) {
    if (!host::have_blas())
      throw invalid_argument(std::string("SHARDEX_GEMM=") + v +
                             ": this build of shardex has no BLAS (configured with -Dblas=disabled, or none was "
                             "found); use eigen or auto");
    return static_cast<int>(host::GemmKernel::blas);
  }
  if (std::string_view(v) == host::kernel_name(host::GemmKernel::own)) {
    if (!host::detail::own_gemm_available())
      throw invalid_argument(std::string("SHARDEX_GEMM=") + v +
                             ": shardex's own kernel needs a CPU with AVX-512F, which this one has not; use eigen, "
                             "blas or auto");
    return static_cast<int>(host::GemmKernel::own);
  }
  throw invalid_argument(std::string("SHARDEX_GEMM=") + v + ": expected eigen, blas, shardex or auto");
}

// The cache of a measurement (SHARDEX_GEMM_CACHE, else
// $XDG_CACHE_HOME/shardex/gemm-kernels.json or ~/.cache/...; empty: none),
// valid for the machine, the thread count and this library's classes. Rank 0
// alone reads and writes it. Anything unexpected in it is a miss: measured again.
std::string cache_path() {
  if (const char* v = std::getenv("SHARDEX_GEMM_CACHE")) return v;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/shardex/gemm-kernels.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/shardex/gemm-kernels.json";
  return "";
}

std::string cache_key() {
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 1);
      break;
    }
  std::string classes;  // the classes' cubes: a library that times others does not read this cache
  for (const auto c : cube) classes += std::to_string(c) + "^3 ";
  std::string blas = host::kernel_name(host::GemmKernel::blas);
#if SHARDEX_WITH_BLAS
  correct_blas_core();
  blas += std::string(" ") + openblas_get_corename();  // times of other kernels are not these
#endif
  // The classes shardex's kernel competes for are part of what the times are: one digit per class.
  std::string own;
  if (host::detail::own_gemm_available()) {
    own = " vs shardex on ";
    for (int cls = 0; cls < n_classes; ++cls)
      own += candidate(static_cast<int>(host::GemmKernel::own), cls) ? '1' : '0';
  }
  return blas + " vs eigen" + own + "; " + classes + std::to_string(n_classes) + " classes; " +
         std::to_string(host::threads()) + " thread(s);" + cpu;
}

// ns (n_kernels per class: 0 exactly where a kernel does not run the class) and
// the ranks they sum over, or false.
bool read_cache(const std::string& path, std::array<std::int64_t, n_times>& ns, std::int64_t& ranks) {
  if (path.empty()) return false;
  std::ifstream in(path);
  if (!in) return false;
  try {
    const nlohmann::json doc = nlohmann::json::parse(in);
    if (doc.at("key").get<std::string>() != cache_key()) return false;
    const auto& t = doc.at("ns");
    if (!t.is_array() || t.size() != ns.size()) return false;
    for (int cls = 0; cls < n_classes; ++cls)
      for (int k = 0; k < n_kernels; ++k) {
        ns[at(cls, k)] = t[at(cls, k)].get<std::int64_t>();
        if (timed_at_start(k, cls) ? ns[at(cls, k)] <= 0 : ns[at(cls, k)] != 0) return false;
      }
    ranks = doc.at("ranks").get<std::int64_t>();
    return ranks >= 1;
  } catch (const std::exception&) {  // not JSON, a member missing or of another type
    return false;
  }
}

// Written to a temporary file and renamed: a reader sees the old file or the new one.
void write_cache(const std::string& path, const std::array<std::int64_t, n_times>& ns, std::int64_t ranks) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"key", cache_key()}, {"ranks", ranks}, {"ns", ns}}.dump() << "\n";
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return;  // a cache that cannot be written: the next run measures again
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

void measure(Choice& c) {
  for (int type = 0; type < n_types; ++type)
    for (int t = 0; t < n_trans; ++t)
      for (int s = 0; s < n_sizes; ++s) {
        const int cls = class_of(type, t >= 2, t % 2 == 1, s);
        for (int k = 0; k < n_kernels; ++k) {
          const auto kernel = static_cast<host::GemmKernel>(k);
          if (!timed_at_start(k, cls)) continue;  // its time stays 0
          c.ns[at(cls, k)] = type == 0 ? time_kernel<float>(kernel, cube[s], t >= 2, t % 2 == 1, repeats[s])
                                       : time_kernel<double>(kernel, cube[s], t >= 2, t % 2 == 1, repeats[s]);
        }
      }
}

// The kernel of a class from its times: the fastest, but the BLAS's unless
// another is more than 5 % faster than it. A class's cube is timed with its operands in cache, where the two
// come within a few percent of each other on large products (and trade places
// between runs); in a model's step, its weights read cold, OpenBLAS's kernel
// was the faster: GPT-2 small's step 8-20 % faster with it for every product
// than with Eigen's where a cube had Eigen ahead by 0.5-6 % (bench/RESULTS.md,
// "The GEMM classes").
host::GemmKernel faster(const std::array<std::int64_t, n_times>& ns, int cls) {
  int best = -1;
  for (int k = 0; k < n_kernels; ++k)
    if (ns[at(cls, k)] > 0 && (best < 0 || ns[at(cls, k)] < ns[at(cls, best)])) best = k;
  const int blas = static_cast<int>(host::GemmKernel::blas);
  if (best < 0) return host::GemmKernel::eigen;
  if (best != blas && ns[at(cls, blas)] > 0 &&
      static_cast<double>(ns[at(cls, blas)]) < 1.05 * static_cast<double>(ns[at(cls, best)]))
    best = blas;
  return static_cast<host::GemmKernel>(best);
}

// Whether there is a choice to measure: another kernel than Eigen's.
bool kernels_to_choose_from() {
  return host::kernel_available(host::GemmKernel::blas, 4) || host::kernel_available(host::GemmKernel::own, 4);
}

void choose_locked(const host::GemmAgreement& agree) {
  Choice c;
  c.made = true;
  const int requested = requested_kernel();
  if (requested >= 0 || !kernels_to_choose_from()) {
    // The named kernel where it runs the class (shardex's: float only), Eigen's elsewhere.
    const auto named = static_cast<host::GemmKernel>(std::max(requested, 0));
    for (int cls = 0; cls < n_classes; ++cls)
      c.kernel[static_cast<std::size_t>(cls)] =
          host::kernel_available(named, type_of_class(cls) == 0 ? 4 : 8) ? named : host::GemmKernel::eigen;
    choice() = c;
    return;
  }
  c.measured = true;
  // Rank 0 says whether its cache holds the times, and which: every rank takes rank 0's.
  const std::string path = agree.rank == 0 ? cache_path() : std::string();
  std::vector<std::int64_t> cached(n_times + 2, 0);  // found, ranks, ns...
  if (agree.rank == 0) {
    std::array<std::int64_t, n_times> ns{};
    std::int64_t ranks = 1;
    if (read_cache(path, ns, ranks)) {
      cached[0] = 1;
      cached[1] = ranks;
      std::copy(ns.begin(), ns.end(), cached.begin() + 2);
    }
  }
  if (agree.broadcast) agree.broadcast(cached);
  if (cached[0] == 1) {
    c.from_cache = true;
    c.ranks = cached[1];
    std::copy(cached.begin() + 2, cached.end(), c.ns.begin());
  } else {
    measure(c);
    if (agree.sum) {
      std::vector<std::int64_t> times(c.ns.begin(), c.ns.end());
      times.push_back(1);  // summed: the number of ranks, so that the rates are per rank
      agree.sum(times);
      c.ranks = std::max<std::int64_t>(times.back(), 1);
      std::copy(times.begin(), times.end() - 1, c.ns.begin());
    }
    if (agree.rank == 0) write_cache(path, c.ns, c.ranks);
  }
  for (int cls = 0; cls < n_classes; ++cls) c.kernel[static_cast<std::size_t>(cls)] = faster(c.ns, cls);
  choice() = c;
}

const Choice& current() {
  std::lock_guard lock(choice_mutex());
  if (!choice().made) choose_locked({});
  return choice();
}

double gflops(std::int64_t s, std::int64_t ns) {
  return 2.0 * static_cast<double>(s * s * s) / static_cast<double>(ns);
}

}  // namespace

namespace host {

const char* kernel_name(GemmKernel k) noexcept {
  return k == GemmKernel::blas ? "openblas" : k == GemmKernel::own ? "shardex" : "eigen";
}

bool have_blas() noexcept { return SHARDEX_WITH_BLAS != 0; }

bool kernel_available(GemmKernel k, int element_bytes) noexcept {
  switch (k) {
    case GemmKernel::eigen:
      return true;
    case GemmKernel::blas:
      return have_blas();
    case GemmKernel::own:
      return element_bytes == 4 && detail::own_gemm_available();
  }
  return false;
}

GemmKernel tuning_kernel(int step) noexcept {
  // Eigen, the BLAS, shardex's, then back (a drift of the machine's speed falls on every kernel alike).
  std::array<GemmKernel, n_kernels> turn{};
  int n = 0;
  for (int k = 0; k < n_kernels; ++k)
    if (kernel_available(static_cast<GemmKernel>(k), 4))
      turn[static_cast<std::size_t>(n++)] = static_cast<GemmKernel>(k);
  const int i = std::max(step, 0) % (2 * n);
  return turn[static_cast<std::size_t>(i < n ? i : 2 * n - 1 - i)];
}

std::string blas_core() {
#if SHARDEX_WITH_BLAS
  correct_blas_core();
  return std::string(openblas_get_corename()) + blas_core_note();
#else
  return "none";
#endif
}

GemmKernel gemm_kernel(const GemmShape& g, int element_bytes) {
  return current().kernel[class_of(element_bytes == 8 ? 1 : 0, g.ta, g.tb, size_class(g))];
}

void choose_gemm_kernels(const GemmAgreement& agree) {
  std::lock_guard lock(choice_mutex());
  choose_locked(agree);
}

void tune_gemm_kernels(const GemmAgreement& agree, int steps, const std::function<void()>& step) {
  if (steps < 2 || steps % 2 != 0)
    throw invalid_argument("tune_gemm_kernels: " + std::to_string(steps) +
                           " steps; expected an even count of at least 2 (the kernels run in turn, there and back)");
  const bool choosing = current().measured;  // false: SHARDEX_GEMM's kernel, or Eigen's alone
  Tuning& tune = tuning();
  {
    std::lock_guard lock(choice_mutex());
    tune.ns.fill(0), tune.flops.fill(0);
  }
  {
    struct Release {  // the choice again when the steps end, by a throw too
      Tuning& t;
      ~Release() { t.forced.store(-1); }
    } release{tune};
    for (int s = 0; s < steps; ++s) {
      if (choosing) tune.forced.store(static_cast<int>(tuning_kernel(s)));
      step();
    }
  }
  if (!choosing) return;
  std::vector<std::int64_t> totals;  // per class and kernel: ns, then flops
  {
    std::lock_guard lock(choice_mutex());
    totals.insert(totals.end(), tune.ns.begin(), tune.ns.end());
    totals.insert(totals.end(), tune.flops.begin(), tune.flops.end());
  }
  if (agree.sum) agree.sum(totals);
  constexpr std::size_t n = n_times;
  std::lock_guard lock(choice_mutex());
  Choice& c = choice();
  if (!c.measured) return;  // a step chose again under SHARDEX_GEMM: that choice stands
  c.tuned_steps = steps;
  for (int cls = 0; cls < n_classes; ++cls) {
    // Chosen again only when every kernel that competes for the class ran some of its work (2 steps
    // and three kernels: shardex's ran none), and two or more did; else the class keeps its kernel
    // (and an earlier tuning's rates).
    std::array<bool, n_kernels> timed{};
    int ran = 0;
    bool all_ran = true;
    for (int k = 0; k < n_kernels; ++k) {
      timed[static_cast<std::size_t>(k)] = totals[at(cls, k)] > 0 && totals[n + at(cls, k)] > 0;
      ran += timed[static_cast<std::size_t>(k)] ? 1 : 0;
      all_ran = all_ran && (timed[static_cast<std::size_t>(k)] || !candidate(k, cls));
    }
    if (ran < 2 || !all_ran) continue;
    int best = -1;
    for (int k = 0; k < n_kernels; ++k) {
      const std::size_t i = at(cls, k);
      const bool t = timed[static_cast<std::size_t>(k)];
      // A rank's rate: flops over ns, both summed over the ranks (the same on every rank).
      c.tuned_gflops[i] = t ? static_cast<double>(totals[n + i]) / static_cast<double>(totals[i]) : 0.0;
      if (t && (best < 0 || c.tuned_gflops[i] > c.tuned_gflops[at(cls, best)])) best = k;
    }
    c.kernel[static_cast<std::size_t>(cls)] = static_cast<GemmKernel>(best);
  }
}

template <class T>
void gemm_with(GemmKernel k, const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const shardex::detail::GemmTimer timed(product_flops(g));
  run_kernel(k, g, alpha, a, b, beta, c);
}
template void gemm_with<float>(GemmKernel, const GemmShape&, float, const float*, const float*, float, float*);
template void gemm_with<double>(GemmKernel, const GemmShape&, double, const double*, const double*, double, double*);

GemmChoice gemm_kernels() {
  const Choice& c = current();
  GemmChoice out;
  out.measured = c.measured;
  out.from_cache = c.from_cache;
  out.tuned_steps = c.tuned_steps;
  for (int type = 0; type < n_types; ++type)
    for (int t = 0; t < n_trans; ++t)
      for (int s = 0; s < n_sizes; ++s) {
        const int cls = class_of(type, t >= 2, t % 2 == 1, s);
        GemmClassChoice k;
        k.element_bytes = type == 0 ? 4 : 8;
        k.ta = t >= 2;
        k.tb = t % 2 == 1;
        k.size = size_names[s];
        k.cube = cube[s];
        k.kernel = c.kernel[cls];
        if (c.measured) {
          const auto rate = [&](GemmKernel kernel) {
            const std::int64_t ns = c.ns[at(cls, static_cast<int>(kernel))];
            return ns > 0 ? gflops(cube[s], ns) * static_cast<double>(c.ranks) : 0.0;
          };
          k.eigen_gflops = rate(GemmKernel::eigen);
          k.blas_gflops = rate(GemmKernel::blas);
          k.own_gflops = rate(GemmKernel::own);
          k.tuned_eigen_gflops = c.tuned_gflops[at(cls, static_cast<int>(GemmKernel::eigen))];
          k.tuned_blas_gflops = c.tuned_gflops[at(cls, static_cast<int>(GemmKernel::blas))];
          k.tuned_own_gflops = c.tuned_gflops[at(cls, static_cast<int>(GemmKernel::own))];
        }
        out.classes.push_back(k);
      }
  return out;
}

namespace {
std::string class_label(const GemmClassChoice& k) {
  return std::string(k.element_bytes == 4 ? "float" : "double") + " " + (k.ta ? "T" : "N") + (k.tb ? "T" : "N") + " " +
         k.size;
}
}  // namespace

std::string gemm_kernels_report() {
  const GemmChoice c = gemm_kernels();
  if (!c.measured) {
    // The float classes come first, the double ones last: SHARDEX_GEMM=shardex runs Eigen's for double.
    const GemmKernel for_float = c.classes.front().kernel, for_double = c.classes.back().kernel;
    const char* named = std::getenv("SHARDEX_GEMM");
    const bool by_variable = named != nullptr && *named != '\0' && std::string_view(named) != "auto";
    return std::string("gemm kernels: ") +
           (for_float == for_double ? std::string(kernel_name(for_float)) + " for every product"
                                    : std::string(kernel_name(for_float)) + " for the float products, " +
                                          kernel_name(for_double) + " for the double ones") +
           (by_variable ? " (SHARDEX_GEMM)" : " (the only kernel here)") +
           (have_blas() ? std::string(", ") + kernel_name(GemmKernel::blas) + " core " + blas_core()
                        : std::string(", a build without BLAS")) +
           "\n";
  }
  std::string out =
      std::string("gemm kernels (") + (c.from_cache ? "measured before, from the cache" : "measured at start-up") +
      (c.tuned_steps > 0 ? ", tuned on " + std::to_string(c.tuned_steps) + " steps of the program" : std::string()) +
      "; SHARDEX_GEMM=eigen|blas|shardex|auto overrides), " + kernel_name(GemmKernel::blas) + " core " + blas_core() +
      ":\n";
  char line[240];
  for (const GemmClassChoice& k : c.classes) {
    std::snprintf(line, sizeof line, "  %-16s (%3lld^3): %-8s  eigen %6.1f GFLOP/s", class_label(k).c_str(),
                  static_cast<long long>(k.cube), kernel_name(k.kernel), k.eigen_gflops);
    out += line;
    if (have_blas()) {
      std::snprintf(line, sizeof line, ", %s %6.1f GFLOP/s", kernel_name(GemmKernel::blas), k.blas_gflops);
      out += line;
    }
    if (k.own_gflops > 0) {
      std::snprintf(line, sizeof line, ", shardex %6.1f GFLOP/s", k.own_gflops);
      out += line;
    }
    if (k.tuned_eigen_gflops > 0 || k.tuned_blas_gflops > 0 || k.tuned_own_gflops > 0) {
      std::snprintf(line, sizeof line, "; in the steps eigen %6.1f, %s %6.1f", k.tuned_eigen_gflops,
                    kernel_name(GemmKernel::blas), k.tuned_blas_gflops);
      out += line;
      if (k.tuned_own_gflops > 0) {
        std::snprintf(line, sizeof line, ", shardex %6.1f", k.tuned_own_gflops);
        out += line;
      }
    }
    out += "\n";
  }
  return out;
}

std::string gemm_kernels_json() {
  const GemmChoice c = gemm_kernels();
  std::string out = std::string("\"gemm_kernels\":{\"measured\":") + (c.measured ? "true" : "false") +
                    ",\"tuned_steps\":" + std::to_string(c.tuned_steps) +
                    ",\"blas_core\":" + nlohmann::json(blas_core()).dump();
  for (const GemmClassChoice& k : c.classes) out += ",\"" + class_label(k) + "\":\"" + kernel_name(k.kernel) + "\"";
  return out + "}";
}

}  // namespace host

template <class T>
void Host::gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const detail::GemmTimer timed(product_flops(g));
  Tuning& tune = tuning();
  const int forced = tune.forced.load(std::memory_order_relaxed);
  // k 0: C = beta C, no product to time (it would count as 0 flops); a kernel that does not compete
  // for the class (shardex's for double, or for the large and huge NT, TN, TT): the class's choice,
  // untimed. The class is worked out only while tuning: the usual product asks gemm_kernel alone.
  const int cls = forced < 0 || g.k == 0 ? -1 : class_of(sizeof(T) == 8 ? 1 : 0, g.ta, g.tb, size_class(g));
  if (cls < 0 || !candidate(forced, cls)) {
    run_kernel(host::gemm_kernel(g, sizeof(T)), g, alpha, a, b, beta, c);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  run_kernel(static_cast<host::GemmKernel>(forced), g, alpha, a, b, beta, c);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const std::size_t i = at(cls, forced);
  std::lock_guard lock(choice_mutex());
  tune.ns[i] += static_cast<std::int64_t>(ns);
  tune.flops[i] += std::llround(product_flops(g));
}

template <class T>
const char* Host::gemm_kernel(const GemmShape& g) {
  return host::kernel_name(host::gemm_kernel(g, sizeof(T)));
}

template void Host::gemm<float>(const GemmShape&, float, const float*, const float*, float, float*);
template void Host::gemm<double>(const GemmShape&, double, const double*, const double*, double, double*);
template const char* Host::gemm_kernel<float>(const GemmShape&);
template const char* Host::gemm_kernel<double>(const GemmShape&);

}  // namespace shardex
