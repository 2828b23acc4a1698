// SPDX-License-Identifier: MIT
// The C++ side of the safetensors interop test (check_interop.py):
//   interop write PATH   saves "a" (float32, 3 x 5, sharded along dim 1) and
//                        "b" (float64, 4, sharded along dim 0), values
//                        a[i][j] = i * 10 + j + 0.5, b[i] = -1.25 * i
//   interop compare P Q TOL   every tensor of P is in Q with the same shape and
//                        values within TOL (relative to max(1, |value|)), and
//                        both hold the same names, dtypes and metadata (checkpoints of two runs)
//   interop read PATH    loads "x" (float32, 2 x 3 x 4) sharded along dim 2 and
//                        "y" (float64, 5) replicated, and checks
//                        x[i][j][k] = i * 100 + j * 10 + k + 0.25, y[i] = i * i / 8
//   interop narrow PATH  saves v32 (float32, 97, sharded) as it is and as BF16
//                        (v32_bf16) and F16 (v32_f16), and v64 (float64) as it
//                        is and as F16 (v64_f16): values of every magnitude
//                        (Python rounds v32 and v64 itself and compares bits)
//   interop widen PATH   loads h (F16) and, if the file has it, bf (BF16) as
//                        float and double, sharded, and checks them against
//                        h_f32 and bf_f32 (Python's own widening to float32)
// Run under mpirun at any world size; exits 1 on a wrong value.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/io/safetensors.hpp>

using namespace shardex;

namespace {
std::vector<std::int64_t> even(std::int64_t total, int n) {
  std::vector<std::int64_t> ls(static_cast<std::size_t>(n), total / n);
  ls.back() += total % n;
  return ls;
}

/// Values with many fraction bits, from F16's subnormals to past its largest.
double narrow_value(std::int64_t i) {
  return std::ldexp(1.0 + static_cast<double>(i * 7919 % 1009) / 1009.0, static_cast<int>(i % 46) - 26) *
         (i % 3 == 0 ? -1 : 1);
}

/// Whether tensors `a` and `b` of `path` load into T (sharded) with the same bits.
template <class T>
bool same_bits(const mpi::Communicator& comm, const std::string& path, const std::string& a, const std::string& b,
               std::int64_t len) {
  const auto x = load<T, Sharded<0>>(comm, path, a, even(len, comm.size()));
  const auto y = load<T, Sharded<0>>(comm, path, b, even(len, comm.size()));
  return x.shape() == y.shape() && std::memcmp(x.data(), y.data(), static_cast<std::size_t>(x.size()) * sizeof(T)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const auto comm = mpi::Communicator::world();
  if (argc < 3) {
    std::cerr << "usage: interop write|read|narrow|widen PATH, or interop compare PATH OTHER TOL\n";
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  if (mode == "compare" && argc == 5) {
    const std::string other = argv[3];
    const double tol = std::stod(argv[4]);
    const auto a = list_tensors(comm, path), b = list_tensors(comm, other);
    bool ok = a.size() == b.size() && read_metadata(comm, path) == read_metadata(comm, other);
    // Each tensor's largest difference over its largest magnitude, so that
    // AdamW's second moments (about 1e-6) are held to 1e-12 of theirs, not to
    // 1e-12 absolute. A bias is measured against its weight's scale where that
    // is larger: attention's key bias has a gradient of exactly 0 in exact
    // arithmetic (softmax ignores a shift of a row's scores), so its gradient
    // and moments are rounding residues of the weight's terms, as --check
    // measures them (docs/guides/gpt2.md).
    struct Measured {
      double diff = 0, scale = 0;
    };
    std::map<std::string, Measured> measured;
    const auto diff = [&](const std::string& name, const auto& x, const auto& y) {
      ok = ok && x.shape() == y.shape();
      Measured m;
      constexpr double inf = std::numeric_limits<double>::infinity();
      for (std::int64_t i = 0; ok && i < x.size(); ++i) {
        // A NaN or an infinity on either side is a difference, never a match.
        const double d = std::abs(double(x.data()[i]) - double(y.data()[i]));
        m.diff = std::max(m.diff, std::isfinite(d) ? d : inf);
        m.scale = std::max(m.scale, std::abs(double(y.data()[i])));
      }
      measured[name] = m;
    };
    for (const auto& t : a) {
      bool found = false;
      for (const auto& u : b) found = found || (u.name == t.name && u.dtype == t.dtype);
      ok = ok && found && (t.dtype == "F64" || t.dtype == "F32");
      if (!ok) break;
      if (t.dtype == "F64")
        diff(t.name, load<double, Replicated>(comm, path, t.name), load<double, Replicated>(comm, other, t.name));
      else
        diff(t.name, load<float, Replicated>(comm, path, t.name), load<float, Replicated>(comm, other, t.name));
    }
    double worst = 0;
    std::string worst_name;
    const std::string bias = ".bias";
    for (const auto& [name, m] : measured) {
      double scale = m.scale;
      if (name.ends_with(bias))
        if (const auto w = measured.find(name.substr(0, name.size() - bias.size()) + ".weight"); w != measured.end())
          scale = std::max(scale, w->second.scale);
      const double rel = m.diff == 0 ? 0
                         : std::isfinite(m.diff) && scale > 0 && std::isfinite(scale)
                             ? m.diff / scale
                             : std::numeric_limits<double>::infinity();
      if (rel > worst) worst = rel, worst_name = name;
    }
    ok = ok && worst <= tol;
    if (comm.rank() == 0)
      std::cout << a.size() << " tensors, max difference relative to a tensor's largest element " << worst
                << (worst_name.empty() ? "" : " (" + worst_name + ")") << " (tolerance " << tol
                << "): " << (ok ? "same" : "DIFFERENT") << "\n";
    return ok ? 0 : 1;
  }
  const int n = comm.size();
  if (mode == "narrow") {
    const auto v = [](std::span<const std::int64_t> i) { return narrow_value(i[0]); };
    const auto v32 = Tensor<float, Sharded<0>>::from_function(
        comm, {97}, [&](std::span<const std::int64_t> i) { return float(v(i)); }, even(97, n));
    const auto v64 = Tensor<double, Sharded<0>>::from_function(comm, {97}, v, even(97, n));
    save(path, TensorList()
                   .add("v32", v32)
                   .add("v32_bf16", v32, StoredAs::bf16)
                   .add("v32_f16", v32, StoredAs::f16)
                   .add("v64", v64)
                   .add("v64_f16", v64, StoredAs::f16));
    return 0;
  }
  if (mode == "widen") {
    bool ok = true;
    int checked = 0;
    for (const auto& t : list_tensors(comm, path)) {
      if (t.name != "h" && t.name != "bf") continue;
      ++checked;
      const std::int64_t len = t.shape[0];
      const bool f = same_bits<float>(comm, path, t.name, t.name + "_f32", len),
                 d = same_bits<double>(comm, path, t.name, t.name + "_f32", len);
      if (comm.rank() == 0)
        std::cout << t.name << " (" << t.dtype << ", " << len << ") as float: " << (f ? "same" : "DIFFERENT")
                  << "; as double: " << (d ? "same" : "DIFFERENT") << "\n";
      ok = ok && f && d;
    }
    return ok && checked > 0 ? 0 : 1;
  }
  if (mode == "write") {
    auto a = Tensor<float, Sharded<1>>::from_function(
        comm, {3, 5}, [](std::span<const std::int64_t> i) { return float(i[0] * 10 + i[1]) + 0.5f; }, even(5, n));
    auto b = Tensor<double, Sharded<0>>::from_function(
        comm, {4}, [](std::span<const std::int64_t> i) { return -1.25 * double(i[0]); }, even(4, n));
    save(path, TensorList().add("a", a).add("b", b).metadata("written_by", "shardex"));
    return 0;
  }
  const auto x = load<float, Sharded<2>>(comm, path, "x", even(4, n));
  const auto y = load<double, Replicated>(comm, path, "y");
  bool ok = x.shape() == Shape{2, 3, 4} && y.shape() == Shape{5};
  const std::int64_t off = x.global_offset();
  for (int i = 0; ok && i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (std::int64_t k = 0; k < x.local_shape()[2]; ++k)
        ok = ok && x(i, j, k) == float(i * 100 + j * 10 + (k + off)) + 0.25f;
  for (int i = 0; ok && i < 5; ++i) ok = ok && y(i) == double(i * i) / 8;
  std::cout << "rank " << comm.rank() << ": " << (ok ? "the values Python wrote" : "WRONG values") << "\n";
  return ok ? 0 : 1;
}
