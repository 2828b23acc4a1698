// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Which kernel runs each host GEMM: Eigen's, the BLAS the library
/// was built with (OpenBLAS; the `blas` Meson option), or shardex's own
/// (float, on a CPU with AVX-512F: src/host_own_gemm.cpp, made for the
/// products of few rows whose weights come from memory, a transformer's at
/// small batches), chosen per shape class.
///
/// No kernel is the faster on every machine of a kind (on one, Eigen's
/// float GEMM ran 68 GFLOP/s on a core and OpenBLAS's 86; on another Eigen
/// was the faster), so the choice is measured: each class below is timed with
/// every kernel that runs it on a product of its size, once per process, when the
/// environment starts (mpi::Environment), or at the first product in a
/// program that makes none. Over MPI every rank measures at the same time and
/// the ranks agree on the sums of their times, so that every rank runs a
/// class's products with the same kernel (a Replicated result stays equal on
/// all of them). The measurement takes a few tens of ms, and is cached in a
/// file for the next runs on the machine (see choose_gemm_kernels).
///
/// A cube in cache is not a model's product: tune_gemm_kernels chooses again
/// from the program's own steps (gemm_tuning.hpp: over a communicator).
///
/// `SHARDEX_GEMM=eigen`, `SHARDEX_GEMM=blas` or `SHARDEX_GEMM=shardex` skips it
/// and takes that kernel for every class (shardex's for the float ones, Eigen's
/// for double); `auto` (or unset) measures. `explain` names the kernel of
/// each matmul, a trace records the table (`gemm kernels`), and
/// `gemm_kernels_report()` prints it.
///
/// @code
/// std::cout << shardex::host::gemm_kernels_report();
/// // gemm kernels (measured at start-up; SHARDEX_GEMM=eigen|blas|auto overrides), openblas core SkylakeX:
/// //   float NN small   ( 32^3): openblas  eigen   42.2 GFLOP/s, openblas   94.8 GFLOP/s
/// //   ...
/// @endcode

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardex/device/device.hpp"

namespace shardex::host {

/// A host GEMM kernel.
enum class GemmKernel : std::uint8_t {
  eigen,  ///< Eigen's product (always built)
  blas,   ///< the BLAS of the build (cblas_sgemm / cblas_dgemm), when it has one
  own,    ///< shardex's own (src/host_own_gemm.cpp): float, x86-64 with AVX-512F, one thread
};

/// "eigen", the BLAS's name ("openblas"), or "shardex".
const char* kernel_name(GemmKernel k) noexcept;

/// Whether this build of the library has a BLAS.
bool have_blas() noexcept;

/// Whether kernel `k` runs products of `element_bytes` (4: float, 8: double)
/// here: Eigen's always, the BLAS's in a build with one, shardex's for float on
/// a CPU with AVX-512F. A product sent to a kernel that does not run it runs Eigen's.
bool kernel_available(GemmKernel k, int element_bytes) noexcept;

/// The kernel tune_gemm_kernels forces on its step `step` (from 0): the float
/// kernels here in turn, there and back (Eigen, OpenBLAS, shardex, shardex,
/// OpenBLAS, Eigen, ...), so that a drift of the machine's speed falls on each alike.
GemmKernel tuning_kernel(int step) noexcept;

/// The BLAS's kernels: OpenBLAS's core name ("SkylakeX"), with a note when
/// shardex chose it because OpenBLAS fell back to Prescott's SSE3 kernels on a
/// CPU it did not recognize (a virtual machine's, often) that has AVX-512 or
/// AVX2; "none" without a BLAS. OPENBLAS_CORETYPE, when set, is left alone.
std::string blas_core();

/// The kernel that runs products of shape `g` with elements of `element_bytes`
/// (4: float, 8: double). Measures first if nothing has chosen yet.
GemmKernel gemm_kernel(const GemmShape& g, int element_bytes);

/// One shape class's choice: the class (element size, transposition, size),
/// the kernel chosen, and the kernels' rates on the class's cube (GFLOP/s
/// per rank, from the ranks' summed timings; 0 when SHARDEX_GEMM chose, or
/// for a kernel that does not run the class).
struct GemmClassChoice {
  ///@{
  /// The class: 4 (float) or 8 (double) bytes, A and B transposed, "small",
  /// "medium", "large" or "huge" by the geometric mean of m, n, k (below 48,
  /// below 160, below 320, above), and the side of the cube it was timed on.
  int element_bytes = 4;
  bool ta = false, tb = false;
  const char* size = "";
  std::int64_t cube = 0;
  ///@}
  GemmKernel kernel = GemmKernel::eigen;  ///< the kernel its products run
  ///@{
  /// The measured rates of Eigen's kernel, the BLAS's and shardex's (0: not measured).
  double eigen_gflops = 0, blas_gflops = 0, own_gflops = 0;
  ///@}
  ///@{
  /// Their rates over the program's own products of the class, when
  /// tune_gemm_kernels chose the kernel from them (0: not tuned, or the
  /// kernel ran none of them), per rank.
  double tuned_eigen_gflops = 0, tuned_blas_gflops = 0, tuned_own_gflops = 0;
  ///@}
};

/// The choice of every class; `measured` is false when SHARDEX_GEMM named the
/// kernel or Eigen's is the only one here.
struct GemmChoice {
  bool measured = false;                 ///< whether the kernels were timed (now, or in the cache)
  bool from_cache = false;               ///< the times came from the cache file
  int tuned_steps = 0;                   ///< the steps tune_gemm_kernels last timed (0: none since the choice)
  std::vector<GemmClassChoice> classes;  ///< every class, float first
};

/// Runs one batched product (as Host::gemm) with kernel `k`, whatever the
/// choice: for benchmarks and tests that compare them. float and double;
/// a kernel that does not run the product (kernel_available) runs Eigen's.
template <class T>
void gemm_with(GemmKernel k, const GemmShape& g, T alpha, const T* a, const T* b, T beta, T* c);

/// The current choice (measuring first if nothing has chosen yet).
GemmChoice gemm_kernels();

/// The choice, one line per class with the kernels' measured rates.
std::string gemm_kernels_report();

/// The choice as one JSON member, for the trace ("gemm_kernels":{...}).
std::string gemm_kernels_json();

/// How the ranks agree on the choice: this rank, an exact element-wise sum
/// over the ranks into every rank's vector, and rank 0's vector to every
/// rank. Empty functions: one rank alone.
struct GemmAgreement {
  int rank = 0;  ///< this rank (0 reads and writes the cache)
  ///@{
  /// The sum over the ranks, and rank 0's values, in place.
  std::function<void(std::vector<std::int64_t>&)> sum, broadcast;
  ///@}
};

/// Chooses the kernel of every class (unless SHARDEX_GEMM names one): from
/// the cache, which rank 0 reads, when it was measured on this machine kind
/// with this thread count; else every rank times each kernel on every class it runs,
/// the ranks sum their times, and rank 0 writes the cache. The environments
/// call it; a later call chooses again. Collective when `agree` is.
/// The cache: SHARDEX_GEMM_CACHE names the file (empty: no cache), else
/// $XDG_CACHE_HOME/shardex/gemm-kernels.json, else ~/.cache/shardex/gemm-kernels.json.
/// @throws invalid_argument if SHARDEX_GEMM is not eigen, blas, shardex or
/// auto, or names blas in a build without one, or shardex on a CPU without AVX-512F.
void choose_gemm_kernels(const GemmAgreement& agree = {});

/// Chooses again from a program's own products, as cuDNN's benchmark mode
/// does: a cube timed with its operands in cache is not a model's product,
/// whose weights come from memory at every step (GPT-2 small's forward
/// products ran 100-125 GFLOP/s through OpenBLAS in the step and 122-138
/// through Eigen, where the start-up cubes had them within 5 %:
/// bench/RESULTS.md, "The GEMM choice in the step").
///
/// Runs `step` `steps` times (an even count), every Host::gemm
/// of a step through one kernel, the kernels here in turn (tuning_kernel:
/// Eigen, OpenBLAS, shardex, shardex, OpenBLAS, Eigen, ...; a kernel that
/// does not compete for a product's class, shardex's for double and for the
/// large and huge NT, TN and TT classes, leaves it to the class's choice,
/// untimed), timing each product (one with k = 0 is no product: not
/// counted); sums each class's time and flops per kernel over the steps and
/// the ranks; and gives every class whose products every kernel competing
/// for it ran (two or more) the one with the highest rate (with 2 steps and
/// three kernels shardex's runs none, and the classes it competes for keep theirs; 6 give
/// each kernel two). The other classes keep their kernel (and the rates an
/// earlier tuning gave them). Whatever else the steps run (an evaluation every N steps, say)
/// counts for the kernel of its step: keep the steps alike. Every
/// rank runs a step's products with the same kernel, so a Replicated result
/// stays equal on all of them. The steps are real (a training step trains).
/// Collective when `agree` is: every rank calls it with the same `steps`.
/// Runs the steps and changes nothing when SHARDEX_GEMM named the kernel or
/// Eigen's is the only one here. If `step` throws, the choice stays as it was and
/// the exception goes on; a later choose_gemm_kernels forgets the tuning.
/// @throws invalid_argument if `steps` is not even and at least 2.
void tune_gemm_kernels(const GemmAgreement& agree, int steps, const std::function<void()>& step);

}  // namespace shardex::host
