// SPDX-License-Identifier: MIT
// Host::gemm through each kernel (Eigen's, the BLAS's, shardex's) against a
// plain triple loop, for every transposition, strides, batches, alpha and beta
// and zero sizes; the choice per shape class (device/host/gemm_kernels.hpp): the
// faster kernel of each class, the same on every rank, SHARDEX_GEMM honoured
// and refused when it names no kernel; the cache of the timing. (test_explain
// checks that explain names each matmul's kernel.)
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "shardex/core/counters.hpp"
#include "shardex/core/error.hpp"
#include "shardex/device/host/gemm_tuning.hpp"
#include "shardex/device/host/host.hpp"

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_gemm {

using namespace shardex;
using shardex::test::world;

namespace {

// Every rank's part of choose_gemm_kernels' agreement, over the test's world.
host::GemmAgreement agreement() {
  host::GemmAgreement a;
  a.rank = world().rank();
  a.sum = [](std::vector<std::int64_t>& v) { world().all_reduce(v.data(), static_cast<std::int64_t>(v.size())); };
  a.broadcast = [](std::vector<std::int64_t>& v) {
    world().broadcast(v.data(), static_cast<std::int64_t>(v.size()), 0);
  };
  return a;
}

// Sets SHARDEX_GEMM and chooses again (every rank, together); restores the
// setting it found at the end (the sanitizer's tests run with eigen).
struct GemmOverride {
  explicit GemmOverride(const char* value) : had_(std::getenv("SHARDEX_GEMM") != nullptr) {
    if (had_) before_ = std::getenv("SHARDEX_GEMM");
    choose(value);
  }
  ~GemmOverride() { choose(had_ ? before_.c_str() : nullptr); }
  GemmOverride(const GemmOverride&) = delete;
  GemmOverride& operator=(const GemmOverride&) = delete;
  static void choose(const char* value) {
    if (value)
      setenv("SHARDEX_GEMM", value, 1);
    else
      unsetenv("SHARDEX_GEMM");
    host::choose_gemm_kernels(agreement());
  }

private:
  bool had_;
  std::string before_;
};

template <class T>
T at(const std::vector<T>& x, std::int64_t i) {
  return x[static_cast<std::size_t>(i)];
}

// C = alpha op(A) op(B) + beta C by the definition, for one batch entry.
template <class T>
void reference_gemm(const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c) {
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) {
      T s = 0;
      for (std::int64_t p = 0; p < g.k; ++p)
        s += (g.ta ? a[p * g.lda + i] : a[i * g.lda + p]) * (g.tb ? b[j * g.ldb + p] : b[p * g.ldb + j]);
      c[i * g.ldc + j] = alpha * s + (beta == T(0) ? T(0) : beta * c[i * g.ldc + j]);
    }
}

using Sizes = std::vector<std::array<std::int64_t, 3>>;  // m, k, n

// Every case of one kernel: returns the largest relative difference from the reference.
template <class T>
double worst_difference(const Sizes& sizes = {
                            {3, 4, 5}, {0, 4, 5}, {3, 0, 5}, {3, 4, 0}, {1, 1, 1}, {17, 9, 33}, {64, 70, 50}}) {
  double worst = 0;
  for (const auto& s : sizes)
    for (int t = 0; t < 4; ++t)
      for (const T beta : {T(0), T(1), T(0.5)})
        for (const std::int64_t batch : {1, 3}) {
          const std::int64_t m = s[0], k = s[1], n = s[2];
          const bool ta = t >= 2, tb = t % 2 == 1;
          GemmShape g;
          g.m = m, g.n = n, g.k = k, g.ta = ta, g.tb = tb;
          // Row strides wider than the rows (a sub-matrix), batch entries apart.
          g.lda = (ta ? m : k) + 2, g.ldb = (tb ? k : n) + 1, g.ldc = n + 3;
          g.stride_a = (ta ? k : m) * g.lda + 5, g.stride_b = (tb ? n : k) * g.ldb + 4, g.stride_c = m * g.ldc + 2;
          g.batch = batch;
          std::vector<T> a(static_cast<std::size_t>(g.stride_a * batch)),
              b(static_cast<std::size_t>(g.stride_b * batch));
          std::vector<T> c(static_cast<std::size_t>(g.stride_c * batch));
          for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(std::sin(0.37 * double(i)));
          for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(std::cos(0.21 * double(i)));
          for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<T>(0.1 * double(i % 11));
          std::vector<T> want = c;
          Host::gemm(g, T(0.75), a.data(), b.data(), beta, c.data());
          for (std::int64_t e = 0; e < batch; ++e)
            reference_gemm(g, T(0.75), a.data() + e * g.stride_a, b.data() + e * g.stride_b, beta,
                           want.data() + e * g.stride_c);
          for (std::size_t i = 0; i < c.size(); ++i)  // the padding between rows and entries untouched too
            worst = std::max(worst, std::abs(double(c[i] - want[i])) / (1.0 + std::abs(double(want[i]))));
        }
  return worst;
}

std::int64_t text_hash(const std::string& s) {
  return static_cast<std::int64_t>(std::hash<std::string>{}(s)&0x3fffffffffffffffULL);
}

}  // namespace

TEST_CASE("Host::gemm through Eigen's kernel equals the definition (transpositions, strides, batches, zeros)") {
  const GemmOverride eigen("eigen");
  CHECK(worst_difference<double>() < 1e-13);
  CHECK(worst_difference<float>() < 1e-5);
}

TEST_CASE("Host::gemm through the BLAS equals the definition (transpositions, strides, batches, zeros)" *
          doctest::skip(!host::have_blas())) {
  const GemmOverride blas("blas");
  CHECK(host::gemm_kernel(GemmShape::plain(64, 64, 64), 8) == host::GemmKernel::blas);
  CHECK(worst_difference<double>() < 1e-13);
  CHECK(worst_difference<float>() < 1e-5);
}

// beta 0 means C is not read (as a BLAS defines it): NaN there must not reach
// the result. The BLAS path zeroes C itself and adds with beta 1
// (src/host_gemm.cpp), a row at a time or, where the rows are contiguous
// (ldc == n), in one block; the padding past n keeps what it held.
template <class T>
void check_beta_zero_ignores_c(const std::string& kernel) {
  for (const std::int64_t pad : {0, 3}) {
    CAPTURE(kernel);
    CAPTURE(pad);
    GemmShape g = GemmShape::plain(37, 19, 41);
    g.ldc = g.n + pad, g.stride_c = g.m * g.ldc, g.batch = 2;
    g.stride_a = g.m * g.k, g.stride_b = g.k * g.n;
    std::vector<T> a(static_cast<std::size_t>(g.stride_a * 2)), b(static_cast<std::size_t>(g.stride_b * 2));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(std::sin(0.3 * double(i)));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(std::cos(0.7 * double(i)));
    std::vector<T> c(static_cast<std::size_t>(g.stride_c * 2), std::numeric_limits<T>::quiet_NaN());
    std::vector<T> want(c.size(), T(0));
    Host::gemm(g, T(2), a.data(), b.data(), T(0), c.data());
    for (std::int64_t e = 0; e < 2; ++e)
      reference_gemm(g, T(2), a.data() + e * g.stride_a, b.data() + e * g.stride_b, T(0), want.data() + e * g.stride_c);
    int wrong = 0, padding_kept = 0;
    for (std::int64_t i = 0; i < 2 * g.m; ++i)
      for (std::int64_t j = 0; j < g.ldc; ++j) {
        const T got = at(c, i * g.ldc + j);
        if (j >= g.n)
          padding_kept += std::isnan(got) ? 1 : 0;
        else
          wrong +=
              std::abs(double(got - at(want, i * g.ldc + j))) < 1e-5 * (1 + std::abs(double(at(want, i * g.ldc + j))))
                  ? 0
                  : 1;  // NaN compares false: counted
      }
    CHECK(wrong == 0);
    CHECK(padding_kept == 2 * g.m * pad);
  }
}

TEST_CASE("Host::gemm with beta 0 never reads C: NaN in C does not reach the result, through each kernel") {
  std::vector<std::pair<const char*, bool>> kernels = {
      {"eigen", true}, {"blas", host::have_blas()}, {"shardex", host::kernel_available(host::GemmKernel::own, 4)}};
  int ran = 0;
  for (const auto& [name, available] : kernels) {
    if (!available) continue;
    const GemmOverride kernel(name);
    check_beta_zero_ignores_c<float>(name);
    check_beta_zero_ignores_c<double>(name);
    ++ran;
  }
  CHECK(ran >= 1);
}

// shardex's kernel (src/host_own_gemm.cpp) on its two paths: the small
// products' (op(B) at most 256 columns and 1024 deep: the default sizes, one
// 256 wide and 1024 deep, columns past 64 in tiles of 1 to 4 registers, tiles
// ending inside rows and columns), and the packed panels' (wider or deeper: more than one k block
// (768) and one block of packed rows (336 at k 768), whose tiles end inside
// rows and columns); double under SHARDEX_GEMM=shardex runs Eigen's.
TEST_CASE("Host::gemm through shardex's kernel equals the definition (transpositions, strides, batches, blocks)" *
          doctest::skip(!host::kernel_available(host::GemmKernel::own, 4))) {
  const GemmOverride own("shardex");
  CHECK(host::gemm_kernel(GemmShape::plain(64, 64, 64), 4) == host::GemmKernel::own);
  CHECK(host::gemm_kernel(GemmShape::plain(64, 64, 64), 8) == host::GemmKernel::eigen);
  CHECK(worst_difference<float>() < 1e-5);
  // k up to 1600: float sums in another order than the reference's differ by some k x 2^-24.
  CHECK(worst_difference<float>({{6, 1024, 256}, {67, 64, 65}, {5, 300, 200}, {7, 40, 90}}) < 4e-5);
  CHECK(worst_difference<float>({{344, 1100, 20}, {9, 1600, 97}, {37, 100, 300}}) < 4e-5);
  CHECK(worst_difference<double>() < 1e-13);
}

TEST_CASE(
    "the counters credit each host product with its 2 m n k flops per batch entry and its time; an empty one "
    "with nothing") {
  std::vector<double> a(6 * 4, 0.5), b(4 * 5 * 3, 0.25), c(6 * 5 * 3, 0.0);
  GemmShape g = GemmShape::plain(6, 4, 5);
  const Counters before = counters();
  Host::gemm(g, 1.0, a.data(), b.data(), 0.0, c.data());
  Counters one = counters() - before;
  CHECK(one.gemm_calls == 1);
  CHECK(one.gemm_flops == 2.0 * 6 * 4 * 5);
  CHECK(one.gemm_seconds > 0);
  CHECK(c[0] == doctest::Approx(4 * 0.5 * 0.25));
  g.batch = 3, g.stride_a = 0, g.stride_b = 4 * 5, g.stride_c = 6 * 5;
  const Counters mid = counters();
  host::gemm_with(host::GemmKernel::eigen, g, 1.0, a.data(), b.data(), 0.0, c.data());
  const Counters batched = counters() - mid;
  CHECK(batched.gemm_calls == 1);
  CHECK(batched.gemm_flops == 3 * 2.0 * 6 * 4 * 5);
  const Counters last = counters();
  Host::gemm(GemmShape::plain(0, 4, 5), 1.0, a.data(), b.data(), 0.0, c.data());
  const Counters none = counters() - last;
  CHECK(none.gemm_calls == 0);
  CHECK(none.gemm_flops == 0);
}

// Skipped under the sanitizers: its measurement times Eigen's kernel at -O0
// there, the huge class's 384^3 cube alone for seconds; the main suite runs it.
TEST_CASE(
    "each shape class runs the kernel measured faster (another than the BLAS's by more than 5 %), the same "
    "on every rank" *
    doctest::skip(test::sanitized)) {
  const GemmOverride automatic("auto");
  const host::GemmChoice c = host::gemm_kernels();
  CHECK(c.measured == (host::have_blas() || host::kernel_available(host::GemmKernel::own, 4)));
  REQUIRE(c.classes.size() == 32);  // 2 element types x 4 transpositions x 4 sizes
  for (const auto& k : c.classes) {
    CAPTURE(k.element_bytes);
    CAPTURE(k.ta);
    CAPTURE(k.tb);
    CAPTURE(std::string(k.size));
    if (c.measured) {
      CHECK(k.eigen_gflops > 0);
      CHECK((k.blas_gflops > 0) == host::have_blas());
      // shardex's competes for the NN and NT classes and every small and medium one (src/host_gemm.cpp: in
      // the step its large TN products lost).
      const bool small = std::string(k.size) == "small" || std::string(k.size) == "medium";
      CHECK((k.own_gflops > 0) == (host::kernel_available(host::GemmKernel::own, k.element_bytes) && (!k.ta || small)));
      // The fastest, but the BLAS's unless another is more than 5 % faster (src/host_gemm.cpp: the BLAS
      // reads cold operands better than Eigen's kernel).
      host::GemmKernel fastest = host::GemmKernel::eigen;
      double best = k.eigen_gflops;
      if (k.blas_gflops > best) fastest = host::GemmKernel::blas, best = k.blas_gflops;
      if (k.own_gflops > best) fastest = host::GemmKernel::own, best = k.own_gflops;
      if (k.blas_gflops > 0 && best <= 1.05 * k.blas_gflops) fastest = host::GemmKernel::blas;
      CHECK(k.kernel == fastest);
    } else {
      CHECK(k.kernel == host::GemmKernel::eigen);
    }
    // A product of the class's cube, and of a shape of the same class, runs the class's kernel.
    GemmShape g = GemmShape::plain(k.cube, k.cube, k.cube, k.ta, k.tb);
    CHECK(host::gemm_kernel(g, k.element_bytes) == k.kernel);
    g = GemmShape::plain(k.cube * 2, k.cube, k.cube / 2, k.ta, k.tb);
    CHECK(host::gemm_kernel(g, k.element_bytes) == k.kernel);
  }
  // The ranks agreed: the same table everywhere.
  std::int64_t lo = text_hash(host::gemm_kernels_json()), hi = lo;
  world().all_reduce_min(&lo, 1);
  world().all_reduce_max(&hi, 1);
  CHECK(lo == hi);
  const std::string report = host::gemm_kernels_report();
  CHECK(report.find(c.measured ? "measured" : "for every product") != std::string::npos);
}

// OpenBLAS falls back to Prescott's SSE3 kernels on a CPU model it does not
// know (this machine kind's virtual CPU: 32 GFLOP/s instead of 145); shardex
// chooses the kernels of the instructions the CPU has (src/host_gemm.cpp).
// Skipped without a BLAS, where the user named a core, or off x86 or without AVX2.
bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
TEST_CASE("OpenBLAS does not run its Prescott fallback on a CPU with AVX-512 or AVX2" *
          doctest::skip(!host::have_blas() || std::getenv("OPENBLAS_CORETYPE") != nullptr || !cpu_has_avx2_fma())) {
  const std::string core = host::blas_core();
  CAPTURE(core);
  CHECK(host::gemm_kernels_report().find("core " + core) != std::string::npos);
  // The environment is as the program left it: the variable was set for OpenBLAS's choice only.
  CHECK(std::getenv("OPENBLAS_CORETYPE") == nullptr);
  if (core.find("; left: ") != std::string::npos) {  // an OpenBLAS that cannot change its kernels: said, not hidden
    MESSAGE("this OpenBLAS keeps its fallback: " << core);
    CHECK(core.rfind("Prescott", 0) == 0);
    return;
  }
  CHECK(core.rfind("Prescott", 0) != 0);
}

TEST_CASE("SHARDEX_GEMM that names no kernel is refused, naming the variable and the choices") {
  const GemmOverride restored_at_the_end("auto");
  std::string message;
  setenv("SHARDEX_GEMM", "fastest", 1);
  try {
    host::choose_gemm_kernels();  // before anything is read: no collective
  } catch (const invalid_argument& e) {
    message = e.what();
  }
  CHECK(message == "SHARDEX_GEMM=fastest: expected eigen, blas, shardex or auto");
  if (!host::have_blas()) {
    setenv("SHARDEX_GEMM", "blas", 1);
    CHECK_THROWS_WITH_AS(host::choose_gemm_kernels(), doctest::Contains("has no BLAS"), invalid_argument);
  }
}

// Skipped under the sanitizers: each of its five measurements times Eigen's
// kernel at -O0 there (seconds); the main suite runs it.
TEST_CASE("the measurement is cached: rank 0 reads it, every rank takes it; a damaged cache is measured again" *
          doctest::skip(!host::have_blas() || test::sanitized)) {
  const auto& w = world();
  const GemmOverride automatic("auto");
  std::int64_t pid = static_cast<std::int64_t>(getpid());
  w.broadcast(&pid, 1, 0);
  const std::string path = "/tmp/shardex_gemm_cache_" + std::to_string(pid) + "/kernels.json";
  const char* before = std::getenv("SHARDEX_GEMM_CACHE");
  const std::string saved = before ? before : "";
  setenv("SHARDEX_GEMM_CACHE", path.c_str(), 1);
  const auto read = [&] {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  if (w.rank() == 0) std::remove(path.c_str());
  w.barrier();
  host::choose_gemm_kernels(agreement());  // no file: measured, and written by rank 0
  const host::GemmChoice measured = host::gemm_kernels();
  CHECK(measured.measured);
  CHECK_FALSE(measured.from_cache);
  w.barrier();
  if (w.rank() == 0) CHECK(read().find("\"ns\"") != std::string::npos);
  host::choose_gemm_kernels(agreement());  // read back: the same times, the same choice
  const host::GemmChoice cached = host::gemm_kernels();
  CHECK(cached.from_cache);
  REQUIRE(cached.classes.size() == measured.classes.size());
  for (std::size_t i = 0; i < cached.classes.size(); ++i) {
    CHECK(cached.classes[i].kernel == measured.classes[i].kernel);
    CHECK(cached.classes[i].eigen_gflops == doctest::Approx(measured.classes[i].eigen_gflops));
  }
  CHECK(host::gemm_kernels_report().find("from the cache") != std::string::npos);
  // Damaged (not JSON, a key of another type, empty): measured again and rewritten.
  for (const std::string& damage : {std::string("{not json"), std::string("{\"key\":1}"), std::string("")}) {
    if (w.rank() == 0) std::ofstream(path) << damage;
    w.barrier();
    host::choose_gemm_kernels(agreement());
    CHECK_FALSE(host::gemm_kernels().from_cache);
    w.barrier();
    if (w.rank() == 0) CHECK(read().find("\"ns\"") != std::string::npos);
  }
  // SHARDEX_GEMM_CACHE empty: no file at all.
  setenv("SHARDEX_GEMM_CACHE", "", 1);
  host::choose_gemm_kernels(agreement());
  CHECK_FALSE(host::gemm_kernels().from_cache);
  if (w.rank() == 0) {
    std::remove(path.c_str());
    std::remove(path.substr(0, path.rfind('/')).c_str());
  }
  if (before)
    setenv("SHARDEX_GEMM_CACHE", saved.c_str(), 1);
  else
    unsetenv("SHARDEX_GEMM_CACHE");
  w.barrier();
}

// tune_gemm_kernels (device/host/gemm_kernels.hpp): the steps' products run
// through the kernels in turn (host::tuning_kernel: Eigen, the BLAS,
// shardex's where the CPU runs it, and back; each bit for bit the forced
// kernel's, on shapes where the kernels' results differ), the classes the
// steps ran take the kernel of the highest rate over them, with the same rates
// on every rank (summed over them), the rest keep theirs; a rank whose
// product has no rows runs none, and a product with k = 0 is not counted.
// Skipped without a BLAS (these compare its kernel with the others) and under the sanitizers (Eigen's
// kernel at -O0).
namespace {
struct TunedProduct {
  GemmShape g;
  std::vector<float> a, b;
  explicit TunedProduct(GemmShape shape) : g(shape) {
    a.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, g.m * g.k)));
    b.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, g.k * g.n)));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.37 * double(i)));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(0.21 * double(i)));
  }
  std::vector<float> run() const {  // through the current choice (or the tuning's kernel)
    std::vector<float> c(static_cast<std::size_t>(g.m * g.n), 1.0f);
    Host::gemm(g, 1.0f, a.data(), b.data(), 0.0f, c.data());
    return c;
  }
  std::vector<float> run_with(host::GemmKernel k) const {
    std::vector<float> c(static_cast<std::size_t>(g.m * g.n), 1.0f);
    host::gemm_with(k, g, 1.0f, a.data(), b.data(), 0.0f, c.data());
    return c;
  }
};
const host::GemmClassChoice& class_named(const host::GemmChoice& c, int bytes, bool ta, bool tb, const char* size) {
  for (const auto& k : c.classes)
    if (k.element_bytes == bytes && k.ta == ta && k.tb == tb && std::string_view(k.size) == size) return k;
  throw std::logic_error("no such class");
}
// Every float kernel here gives the product another result than the others.
bool kernels_differ_on(const TunedProduct& p) {
  const bool own = host::kernel_available(host::GemmKernel::own, 4);
  const auto e = p.run_with(host::GemmKernel::eigen), b = p.run_with(host::GemmKernel::blas);
  return e != b && (!own || (p.run_with(host::GemmKernel::own) != e && p.run_with(host::GemmKernel::own) != b));
}
// The highest of a class's rates in the steps, and its kernel.
host::GemmKernel highest_tuned(const host::GemmClassChoice& k) {
  host::GemmKernel best = host::GemmKernel::eigen;
  double rate = k.tuned_eigen_gflops;
  if (k.tuned_blas_gflops > rate) best = host::GemmKernel::blas, rate = k.tuned_blas_gflops;
  if (k.tuned_own_gflops > rate) best = host::GemmKernel::own;
  return best;
}
}  // namespace

TEST_CASE("the tuning's kernels take turns there and back: each kernel here runs as many of 2 x kernels steps") {
  const bool own = host::kernel_available(host::GemmKernel::own, 4);
  const int kernels = 1 + (host::have_blas() ? 1 : 0) + (own ? 1 : 0);
  int runs[3] = {0, 0, 0};
  for (int s = 0; s < 2 * kernels; ++s) ++runs[static_cast<int>(host::tuning_kernel(s))];
  CHECK(runs[0] == 2);
  CHECK(runs[1] == (host::have_blas() ? 2 : 0));
  CHECK(runs[2] == (own ? 2 : 0));
  CHECK(host::tuning_kernel(0) == host::GemmKernel::eigen);
  CHECK(host::tuning_kernel(2 * kernels - 1) == host::GemmKernel::eigen);
  CHECK(host::tuning_kernel(2 * kernels) == host::GemmKernel::eigen);  // and again
  for (int s = 0; s < 2 * kernels; ++s) CHECK(host::tuning_kernel(s) == host::tuning_kernel(2 * kernels - 1 - s));
}

TEST_CASE("tune_gemm_kernels runs each step through one kernel in turn and gives each class the faster over them" *
          doctest::skip(!host::have_blas() || test::sanitized)) {
  const auto& w = world();
  const GemmOverride automatic("auto");
  // float NN huge (256 x 1000 x 768: at k 768 Eigen's and shardex's sum alike), float NN medium
  // (48 x 1100 x 48, no rows on rank 1) and float NT medium (40 x 1100 x 40; all three compete for the
  // medium classes): the kernels' results differ there (shardex's sums k in blocks of 768 beyond 1024),
  // so each step shows which ran. float TN small: only a product with k = 0. float TN large (200^3):
  // shardex's does not compete for it, so in shardex's steps it runs its class's kernel, untimed.
  const TunedProduct huge(GemmShape::plain(256, 1000, 768)), medium(GemmShape::plain(w.rank() == 1 ? 0 : 48, 1100, 48)),
      no_k(GemmShape::plain(64, 64, 0, true, false)), nt_medium(GemmShape::plain(40, 1100, 40, false, true)),
      tn(GemmShape::plain(200, 200, 200, true, false));
  REQUIRE(kernels_differ_on(huge));
  if (w.rank() != 1) REQUIRE(kernels_differ_on(medium));
  REQUIRE(kernels_differ_on(nt_medium));
  REQUIRE(tn.run_with(host::GemmKernel::eigen) != tn.run_with(host::GemmKernel::blas));
  const bool own = host::kernel_available(host::GemmKernel::own, 4);
  const int steps = own ? 6 : 4;  // each kernel two steps
  const host::GemmChoice before = host::gemm_kernels();
  CHECK(before.tuned_steps == 0);
  const host::GemmKernel tn_kernel = class_named(before, 4, true, false, "large").kernel;
  int step = 0, forced_kernel_ran = 0;
  host::tune_gemm_kernels(w, steps, [&] {  // over a communicator (device/host/gemm_tuning.hpp)
    const host::GemmKernel forced = host::tuning_kernel(step);
    for (const TunedProduct* p : {&huge, &medium, &no_k, &nt_medium})
      forced_kernel_ran += p->run() == p->run_with(forced) ? 1 : 0;
    forced_kernel_ran += tn.run() == tn.run_with(forced == host::GemmKernel::own ? tn_kernel : forced) ? 1 : 0;
    ++step;
  });
  CHECK(step == steps);
  CHECK(forced_kernel_ran == 5 * steps);
  const host::GemmChoice tuned = host::gemm_kernels();
  CHECK(tuned.tuned_steps == steps);
  for (const auto* k : {&class_named(tuned, 4, false, false, "huge"), &class_named(tuned, 4, false, false, "medium"),
                        &class_named(tuned, 4, false, true, "medium"), &class_named(tuned, 4, true, false, "large")}) {
    CAPTURE(std::string(k->size));
    CAPTURE(k->ta);
    CHECK(k->tuned_eigen_gflops > 0);
    CHECK(k->tuned_blas_gflops > 0);
    CHECK((k->tuned_own_gflops > 0) == (own && (!k->ta || std::string(k->size) == "medium")));
    CHECK(k->kernel == highest_tuned(*k));
  }
  // A product of a tuned class now runs its class's new kernel.
  CHECK(huge.run() == huge.run_with(class_named(tuned, 4, false, false, "huge").kernel));
  // Classes no step ran, and the one that ran only a product with k = 0, keep their kernels, no rates.
  struct Kept {
    bool ta, tb;
    const char* size;
  };
  for (const Kept& k : {Kept{true, true, "large"}, Kept{true, false, "small"}}) {
    CAPTURE(k.size);
    CHECK(class_named(tuned, 4, k.ta, k.tb, k.size).tuned_eigen_gflops == 0);
    CHECK(class_named(tuned, 4, k.ta, k.tb, k.size).kernel == class_named(before, 4, k.ta, k.tb, k.size).kernel);
  }
  // The ranks agreed: the same rates (summed over them) and the same table everywhere.
  char rates[160];
  const auto& th = class_named(tuned, 4, false, false, "huge");
  const auto& tm = class_named(tuned, 4, false, false, "medium");
  std::snprintf(rates, sizeof rates, "%a %a %a %a %a %a", th.tuned_eigen_gflops, th.tuned_blas_gflops,
                th.tuned_own_gflops, tm.tuned_eigen_gflops, tm.tuned_blas_gflops, tm.tuned_own_gflops);
  for (const std::string& text : {host::gemm_kernels_json(), std::string(rates)}) {
    std::int64_t lo = text_hash(text), hi = lo;
    w.all_reduce_min(&lo, 1);
    w.all_reduce_max(&hi, 1);
    CHECK(lo == hi);
  }
  const std::string report = host::gemm_kernels_report();
  CHECK(report.find("tuned on " + std::to_string(steps) + " steps") != std::string::npos);
  CHECK(report.find("in the steps eigen") != std::string::npos);
  CHECK((report.find("in the steps eigen") != std::string::npos &&
         report.find(", shardex", report.find("in the steps eigen")) != std::string::npos) == own);
  // Choosing again forgets the tuning.
  host::choose_gemm_kernels(agreement());
  CHECK(host::gemm_kernels().tuned_steps == 0);
  CHECK(class_named(host::gemm_kernels(), 4, false, false, "huge").tuned_eigen_gflops == 0);
}

// With 2 steps and three kernels shardex's runs none: the classes it competes for keep their
// kernel (NN huge, NT medium), a large TN class (Eigen's and the BLAS's only) is chosen again.
TEST_CASE("tune_gemm_kernels chooses a class again only when every kernel competing for it ran" *
          doctest::skip(!host::have_blas() || !host::kernel_available(host::GemmKernel::own, 4) || test::sanitized)) {
  const GemmOverride automatic("auto");
  const TunedProduct huge(GemmShape::plain(256, 1000, 768)), tn(GemmShape::plain(200, 200, 200, true, false)),
      scores(GemmShape::plain(64, 64, 64, false, true));
  const host::GemmChoice before = host::gemm_kernels();
  host::tune_gemm_kernels(agreement(), 2, [&] {
    CHECK_FALSE(huge.run().empty());
    CHECK_FALSE(tn.run().empty());
    CHECK_FALSE(scores.run().empty());
  });
  const host::GemmChoice tuned = host::gemm_kernels();
  const auto& nn = class_named(tuned, 4, false, false, "huge");
  CHECK(nn.kernel == class_named(before, 4, false, false, "huge").kernel);
  CHECK(nn.tuned_eigen_gflops == 0);
  CHECK(nn.tuned_own_gflops == 0);
  const auto& nt_medium = class_named(tuned, 4, false, true, "medium");
  CHECK(nt_medium.kernel == class_named(before, 4, false, true, "medium").kernel);
  CHECK(nt_medium.tuned_eigen_gflops == 0);
  const auto& k = class_named(tuned, 4, true, false, "large");
  CHECK(k.tuned_eigen_gflops > 0);
  CHECK(k.tuned_blas_gflops > 0);
  CHECK(k.tuned_own_gflops == 0);
  CHECK(k.kernel == highest_tuned(k));
}

TEST_CASE("tune_gemm_kernels refuses an odd count; a step that throws leaves the choice as it was" *
          doctest::skip(!host::have_blas() || test::sanitized)) {
  const GemmOverride automatic("auto");
  int steps = 0;
  CHECK_THROWS_WITH_AS(host::tune_gemm_kernels(agreement(), 3, [&] { ++steps; }),
                       doctest::Contains("3 steps; expected an even count"), invalid_argument);
  CHECK_THROWS_AS(host::tune_gemm_kernels(agreement(), 0, [&] { ++steps; }), invalid_argument);
  CHECK(steps == 0);
  const TunedProduct huge(GemmShape::plain(256, 1000, 768));
  const host::GemmChoice before = host::gemm_kernels();
  const host::GemmKernel own = class_named(before, 4, false, false, "huge").kernel;
  REQUIRE(kernels_differ_on(huge));
  // The step that throws is the first whose forced kernel is not the class's own.
  const int throwing = own == host::tuning_kernel(0) ? 1 : 0;
  REQUIRE(host::tuning_kernel(throwing) != own);
  bool forced_seen = false;
  CHECK_THROWS_WITH_AS(host::tune_gemm_kernels(agreement(), 4,
                                               [&] {
                                                 if (steps++ == throwing) {
                                                   forced_seen =
                                                       huge.run() == huge.run_with(host::tuning_kernel(throwing));
                                                   throw std::runtime_error("the step failed");
                                                 }
                                               }),
                       "the step failed", std::runtime_error);
  CHECK(forced_seen);
  CHECK(steps == throwing + 1);
  const host::GemmChoice after = host::gemm_kernels();
  CHECK(after.tuned_steps == 0);
  for (std::size_t i = 0; i < after.classes.size(); ++i) CHECK(after.classes[i].kernel == before.classes[i].kernel);
  // No kernel is forced any more: the class's own runs, not the one the failed step forced.
  CHECK(huge.run() == huge.run_with(own));
}

TEST_CASE("tune_gemm_kernels under SHARDEX_GEMM runs the steps through the named kernel and changes nothing") {
  const GemmOverride eigen("eigen");
  const TunedProduct medium(GemmShape::plain(64, 64, 64, false, true));
  if (host::have_blas())  // then the steps would show the BLAS's, were it forced
    REQUIRE(medium.run_with(host::GemmKernel::eigen) != medium.run_with(host::GemmKernel::blas));
  int steps = 0, eigen_ran = 0;
  host::tune_gemm_kernels(agreement(), 2, [&] {
    ++steps;
    eigen_ran += medium.run() == medium.run_with(host::GemmKernel::eigen) ? 1 : 0;
  });
  CHECK(steps == 2);
  CHECK(eigen_ran == 2);
  const host::GemmChoice c = host::gemm_kernels();
  CHECK(c.tuned_steps == 0);
  for (const auto& k : c.classes) CHECK(k.kernel == host::GemmKernel::eigen);
}

}  // namespace shardex_test_gemm
