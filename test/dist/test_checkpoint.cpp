// SPDX-License-Identifier: MIT
// Sharded checkpoints in safetensors files (issue #14), at every world size:
//
// - every layout (I, R, S(0), S(1) of a 3-d tensor, S(2)), float and double,
//   saved by all ranks with lengths 1, 2, ..., n (and with zeros), then
//   loaded on every sub-world of 1 .. n ranks in every layout with other
//   lengths (zeros among them): bit-for-bit the value the test computes
//   itself for each global index;
// - the file is byte-identical whether the world or one rank wrote it, in
//   whatever layout;
// - the header: names, dtypes, shapes, metadata;
// - tensors stored as BF16, F16, F32 or F64 (StoredAs): the nearest stored
//   value of every element, loaded exactly into every type that holds it
//   (the float dtype conversions themselves: unit/test_stored_dtype.cpp),
//   narrowing refused on load, the same bytes from any world;
// - bad input throws on every rank, naming the file and the tensor: a
//   missing name, a dtype that does not match, lengths that do not fit, a
//   truncated file, a header that is not JSON, offsets that lie, a path that
//   cannot be written; a failed save leaves the earlier file intact.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/io/safetensors.hpp>
#include <shardex/mesh.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_checkpoint {

using namespace shardex;

namespace {

using Lens = std::vector<std::int64_t>;
const mpi::Communicator& world() { return test::world(); }

/// A file in a folder of this world size's own (rank 0 makes it).
std::string path_of(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardex_checkpoint_np" + std::to_string(world().size()));
  if (world().rank() == 0) std::filesystem::create_directories(dir);
  world().barrier();
  return (dir / name).string();
}

/// The value at a global index: distinct, exact in float.
template <class T>
T value_at(std::span<const std::int64_t> idx, int salt) {
  std::int64_t k = salt;
  for (auto i : idx) k = k * 31 + i;
  return static_cast<T>(k % 4093) / T(8);
}

template <class T, class L>
Tensor<T, L> make(const mpi::Communicator& comm, const Shape& g, layout_mapping<L> m, int salt) {
  return Tensor<T, L>::from_function(
      comm, g, [&](std::span<const std::int64_t> idx) { return value_at<T>(idx, salt); }, std::move(m));
}

/// Whether every local element is bit for bit the value of its global index.
template <class T, class L>
bool holds(const Tensor<T, L>& t, int salt) {
  const auto expected = make<T, L>(t.comm(), t.shape(), t.mapping(), salt);
  return std::memcmp(expected.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(T)) == 0;
}

template <class L>
layout_mapping<L> lengths_of(const Lens& ls) {
  if constexpr (is_sharded_v<L>)
    return layout_mapping<L>(ls);
  else
    return {};
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Loads tensor `name` (saved with `salt`) on `comm` in layout L with lengths
/// drawn for that communicator, and checks its values.
template <class T, class L>
bool load_and_check(const mpi::Communicator& comm, const std::string& path, const std::string& name, const Shape& g,
                    int salt, std::mt19937_64& rng) {
  Lens ls;
  if constexpr (is_sharded_v<L>) ls = test::random_lengths(rng, comm.size(), g[L::dim]);
  const auto t = load<T, L>(comm, path, name, lengths_of<L>(ls));
  return t.shape() == g && holds(t, salt);
}

/// What a value stored as `dtype` reads back as (io/stored_dtype.hpp's rounding).
double stored_value(const std::string& dtype, double v) {
  if (dtype == "BF16") return io::bf16_value(io::bf16_bits(v));
  if (dtype == "F16") return io::f16_value(io::f16_bits(v));
  if (dtype == "F32") return static_cast<float>(v);
  return v;
}

/// Values that BF16 and F16 must round: many fraction bits, magnitudes from
/// F16's subnormals to past its largest finite value.
double rounding_value(std::span<const std::int64_t> idx) {
  std::int64_t k = 0;
  for (auto i : idx) k = k * 31 + i;
  return std::ldexp(1.0 + static_cast<double>(k % 997) / 997.0, static_cast<int>(k % 46) - 26) * (k % 3 == 0 ? -1 : 1);
}

/// Whether every local element of `t` is what a tensor of Source holding
/// `rounding_value(index)` reads back as when stored as `dtype` (exactly, as T).
template <class Source, class T, class L>
bool holds_stored(const Tensor<T, L>& t, const std::string& dtype) {
  const auto expected = Tensor<T, L>::from_function(
      t.comm(), t.shape(),
      [&](std::span<const std::int64_t> idx) {
        return static_cast<T>(stored_value(dtype, static_cast<Source>(rounding_value(idx))));
      },
      t.mapping());
  return std::memcmp(expected.data(), t.data(), static_cast<std::size_t>(t.size()) * sizeof(T)) == 0;
}

/// Loads `name` (saved from a float tensor if `from_float`, else a double one) as T in layout L.
template <class T, class L>
bool loads_stored(const std::string& path, const std::string& name, const std::string& dtype, bool from_float,
                  const Lens& ls) {
  const auto t = load<T, L>(world(), path, name, lengths_of<L>(ls));
  return from_float ? holds_stored<float>(t, dtype) : holds_stored<double>(t, dtype);
}

}  // namespace

TEST_CASE(
    "save with lengths 1..n in every layout, load on every sub-world in every layout with other lengths: bit for bit") {
  const int n = world().size();
  const Shape g{3, n * (n + 1) / 2 + 1, 4};  // dim 1 takes lengths 1, 2, ..., n plus one on the last rank
  Lens ramp(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ramp[static_cast<std::size_t>(r)] = r + 1;
  ramp.back() += 1;
  auto rng = test::shared_rng(7);
  const Lens l0 = test::random_lengths(rng, n, 3), l2 = test::random_lengths(rng, n, 4);
  const std::string path = path_of("layouts.safetensors");
  save(path, TensorList()
                 .add("inv", make<double, Invariant>(world(), g, {}, 1))
                 .add("rep", make<float, Replicated>(world(), g, {}, 2))
                 .add("s0", make<double, Sharded<0>>(world(), g, l0, 3))
                 .add("s1", make<float, Sharded<1>>(world(), g, ramp, 4))
                 .add("s2", make<double, Sharded<2>>(world(), g, l2, 5))
                 .add("scalar", make<double, Invariant>(world(), Shape{}, {}, 6))
                 .add("empty", make<float, Sharded<0>>(world(), Shape{0, 5}, Lens(static_cast<std::size_t>(n), 0), 7))
                 .metadata("step", "5"));
  const auto names = list_tensors(world(), path);
  REQUIRE(names.size() == 7);
  CHECK(names[0].name == "empty");
  CHECK(names[0].shape == Shape{0, 5});
  CHECK(read_metadata(world(), path).at("step") == "5");
  for (int k = 1; k <= n; ++k) {  // the first k ranks load it
    const auto sub = world().split(world().rank() < k ? 0 : 1, world().rank());
    if (world().rank() >= k) continue;
    CAPTURE(k);
    auto rng = test::shared_rng(100 + static_cast<std::uint64_t>(k));  // the same draws on the ranks of `sub`
    bool ok = true;
    ok &= load_and_check<double, Invariant>(sub, path, "inv", g, 1, rng);
    ok &= load_and_check<double, Sharded<1>>(sub, path, "inv", g, 1, rng);
    ok &= load_and_check<float, Sharded<0>>(sub, path, "rep", g, 2, rng);
    ok &= load_and_check<float, Sharded<2>>(sub, path, "rep", g, 2, rng);
    ok &= load_and_check<double, Replicated>(sub, path, "s0", g, 3, rng);
    ok &= load_and_check<double, Sharded<2>>(sub, path, "s0", g, 3, rng);
    ok &= load_and_check<float, Sharded<1>>(sub, path, "s1", g, 4, rng);
    ok &= load_and_check<float, Sharded<0>>(sub, path, "s1", g, 4, rng);
    ok &= load_and_check<float, Invariant>(sub, path, "s1", g, 4, rng);
    ok &= load_and_check<double, Sharded<0>>(sub, path, "s2", g, 5, rng);
    ok &= load_and_check<double, Sharded<2>>(sub, path, "s2", g, 5, rng);
    ok &= load_and_check<double, Replicated>(sub, path, "scalar", Shape{}, 6, rng);
    ok &= load_and_check<float, Sharded<1>>(sub, path, "empty", Shape{0, 5}, 7, rng);
    CHECK(test::all_ranks(ok, sub));
  }
}

TEST_CASE("the same bytes whether the world or one rank wrote the file, in whatever layout") {
  const int n = world().size();
  const Shape g{5, 7};
  auto rng = test::shared_rng(11);
  const std::string many = path_of("by_world.safetensors"), one = path_of("by_one.safetensors");
  save(many, TensorList()
                 .add("w", make<float, Sharded<1>>(world(), g, test::random_lengths(rng, n, 7), 1))
                 .add("b", make<double, Sharded<0>>(world(), Shape{5}, test::random_lengths(rng, n, 5), 2))
                 .add("c", make<double, Replicated>(world(), g, {}, 3)));
  const auto self = world().split(world().rank(), 0);
  if (world().rank() == 0)
    save(one, TensorList()
                  .add("c", make<double, Sharded<0>>(self, g, Lens{5}, 3))
                  .add("w", make<float, Invariant>(self, g, {}, 1))
                  .add("b", make<double, Replicated>(self, Shape{5}, {}, 2)));
  world().barrier();
  const auto a = bytes_of(many), b = bytes_of(one);
  CHECK(a.size() > 8);
  CHECK(test::all_ranks(a == b));
}

TEST_CASE("bad input throws on every rank, naming the file and the tensor; a failed save leaves the earlier file") {
  const int n = world().size();
  const std::string path = path_of("bad.safetensors");
  const Shape g{4, 3};
  auto rng = test::shared_rng(3);
  save(path, TensorList().add("x", make<double, Sharded<0>>(world(), g, test::random_lengths(rng, n, 4), 1)));
  CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), path, "y")),
                       doctest::Contains("has no tensor \"y\" (it has: x)"), error);
  CHECK_THROWS_WITH_AS((load<float, Replicated>(world(), path, "x")), doctest::Contains("F64 in the file but float32"),
                       error);
  CHECK_THROWS_WITH_AS((load<double, Sharded<0>>(world(), path, "x", Lens(static_cast<std::size_t>(n), 0))),
                       doctest::Contains("lengths"), invalid_argument);
  // A file cut short, a header that is not JSON, offsets that lie: written by rank 0 from the good one.
  const auto good = bytes_of(path);
  const std::string cut = path_of("cut.safetensors"), junk = path_of("junk.safetensors"),
                    lies = path_of("lies.safetensors");
  if (world().rank() == 0) {
    std::ofstream(cut, std::ios::binary).write(good.data(), static_cast<std::streamsize>(good.size() - 8));
    std::string j(good.begin(), good.end());
    j[9] = '@';
    std::ofstream(junk, std::ios::binary).write(j.data(), static_cast<std::streamsize>(j.size()));
    std::string l(good.begin(), good.end());
    const auto at = l.find("[0,96]");
    REQUIRE(at != std::string::npos);
    l.replace(at, 6, "[8,96]");
    std::ofstream(lies, std::ios::binary).write(l.data(), static_cast<std::streamsize>(l.size()));
  }
  world().barrier();
  CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), cut, "x")), doctest::Contains("truncated"), error);
  CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), junk, "x")), doctest::Contains("is not valid JSON"), error);
  CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), lies, "x")),
                       doctest::Contains("data_offsets [8, 96] hold 88 bytes"), error);
  CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), path_of("absent.safetensors"), "x")),
                       doctest::Contains("cannot open"), error);
  // A path that cannot be written.
  CHECK_THROWS_WITH_AS(
      save("/nonexistent-dir/x.safetensors", TensorList().add("x", make<double, Invariant>(world(), g, {}, 1))),
      doctest::Contains("cannot create"), error);
  // A save that fails (its temporary file cannot be made) leaves the earlier file as it was.
  if (world().rank() == 0) std::filesystem::create_directories(path + ".shardex-partial");
  world().barrier();
  CHECK_THROWS_AS(save(path, TensorList().add("x", make<double, Invariant>(world(), g, {}, 9))), error);
  CHECK(test::all_ranks(bytes_of(path) == good));
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove_all(path + ".shardex-partial");
  // Ranks saving different lists: every rank throws, none writes.
  if (n > 1)
    CHECK_THROWS_AS(save(path_of("mixed.safetensors"),
                         TensorList().add(world().rank() == 0 ? "x" : "z", make<double, Invariant>(world(), g, {}, 1))),
                    invalid_argument);
  CHECK_THROWS_WITH_AS(save(path, TensorList()
                                      .add("x", make<double, Invariant>(world(), g, {}, 1))
                                      .add("x", make<double, Invariant>(world(), g, {}, 2))),
                       doctest::Contains("given twice"), invalid_argument);
}

TEST_CASE("names and metadata with quotes, backslashes, control characters and UTF-8 are read back as they were") {
  // The same text as test_trace's: one escaper (src/json_text.hpp) for both files.
  const std::string name = "q\"b\\n\nt\t\x01\x1f\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  const std::string path = path_of("names.safetensors");
  const Shape g{3, 2};
  save(path, TensorList().add(name, make<double, Invariant>(world(), g, {}, 4)).metadata(name, name));
  const auto listed = list_tensors(world(), path);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].name == name);
  CHECK(read_metadata(world(), path) == std::map<std::string, std::string>{{name, name}});
  CHECK(test::all_ranks(holds(load<double, Replicated>(world(), path, name), 4)));
  // The header holds nlohmann-json's escapes; a name that is not UTF-8 is refused on every rank, before any file.
  const auto bytes = bytes_of(path);
  CHECK(std::string(bytes.begin(), bytes.end()).find(R"("q\"b\\n\nt\t\u0001\u001f)") != std::string::npos);
  CHECK_THROWS_WITH_AS(
      save(path_of("bad_name.safetensors"), TensorList().add("x\xff", make<double, Invariant>(world(), g, {}, 1))),
      doctest::Contains("is not valid UTF-8"), invalid_argument);
  CHECK(test::all_ranks(!std::filesystem::exists(path_of("bad_name.safetensors"))));
}

TEST_CASE("mesh tensors: saved from a dp x tp mesh, loaded on another mesh shape and as plain tensors") {
  using dp = axis<"dp">;
  using tp = axis<"tp">;
  using M = Mesh<dp, tp>;
  const int n = world().size();
  const int a = n % 2 == 0 ? 2 : 1;
  const M mesh(world(), {a, n / a});
  const Shape g{5, 6, 3};
  auto rng = test::shared_rng(61);
  const auto value = make<double, Invariant>(world(), g, {}, 9);
  const auto x = MeshTensor<double, M, per_axis<Sharded<0>, Sharded<1>>>::from_global(
      mesh, g, std::span<const double>(value.data(), static_cast<std::size_t>(value.size())),
      {test::random_lengths(rng, a, 5), test::random_lengths(rng, n / a, 6)});
  const auto w = MeshTensor<double, M, per_axis<Invariant, Sharded<2>>>::from_global(
      mesh, g, std::span<const double>(value.data(), static_cast<std::size_t>(value.size())),
      {{}, test::random_lengths(rng, n / a, 3)});
  const std::string path = path_of("mesh.safetensors");
  save(path, TensorList().add("x", x).add("w", w));
  // As plain tensors on the world, and on the transposed mesh (n/a x a) with other layouts.
  CHECK(test::all_ranks(holds(load<double, Sharded<2>>(world(), path, "x", test::random_lengths(rng, n, 3)), 9)));
  CHECK(test::all_ranks(holds(load<double, Replicated>(world(), path, "w"), 9)));
  const M other(world(), {n / a, a});
  const auto y =
      load<double, per_axis<Sharded<2>, Replicated>>(other, path, "x", {test::random_lengths(rng, n / a, 3), {}});
  CHECK(test::all_ranks(to_global(y) == std::vector<double>(value.data(), value.data() + value.size())));
}

TEST_CASE("load_into: a missing name, a 0-d tensor into a 1-d one; ranks asking for different tensors") {
  const std::string path = path_of("into.safetensors");
  save(path, TensorList()
                 .add("s", make<double, Invariant>(world(), Shape{}, {}, 1))
                 .add("v", make<double, Invariant>(world(), Shape{4}, {}, 2)));
  auto t = make<double, Replicated>(world(), Shape{4}, {}, 0);
  CHECK_THROWS_WITH_AS(load_into(t, path, "s"), doctest::Contains("has shape () but the tensor to fill"), error);
  CHECK_THROWS_WITH_AS(load_into(t, path, "nope"), doctest::Contains("has no tensor \"nope\""), invalid_argument);
  load_into(t, path, "v");
  CHECK(test::all_ranks(holds(t, 2)));
  if (world().size() > 1)
    CHECK_THROWS_WITH_AS((load<double, Replicated>(world(), path, world().rank() == 0 ? "v" : "s")),
                         doctest::Contains("not making the same call"), invalid_argument);
  // Under the local check level the file operations still agree: no hang, every rank throws.
  const CheckLevel before = check_level();
  set_check_level(CheckLevel::local);
  if (world().size() > 1)
    CHECK_THROWS_AS(
        save(path_of("local.safetensors"),
             TensorList().add(world().rank() == 0 ? "x" : "y", make<double, Invariant>(world(), Shape{2}, {}, 1))),
        invalid_argument);
  set_check_level(before);
}

TEST_CASE("stored as BF16, F16, F32 or F64: the nearest stored value, loaded exactly into every type that holds it") {
  const int n = world().size();
  const Shape g{6, 5, 4};
  auto rng = test::shared_rng(23);
  const Lens ls = test::random_lengths(rng, n, 5);
  const auto x64 = Tensor<double, Sharded<1>>::from_function(world(), g, rounding_value, ls);
  const auto x32 = Tensor<float, Sharded<1>>::from_function(
      world(), g, [](std::span<const std::int64_t> idx) { return static_cast<float>(rounding_value(idx)); }, ls);
  const std::string path = path_of("stored.safetensors");
  save(path, TensorList()
                 .add("d_bf16", x64, StoredAs::bf16)
                 .add("d_f16", x64, StoredAs::f16)
                 .add("d_f32", x64, StoredAs::f32)
                 .add("d", x64)
                 .add("f_bf16", x32, StoredAs::bf16)
                 .add("f_f16", x32, StoredAs::f16)
                 .add("f_f64", x32, StoredAs::f64)
                 .add("f", x32, StoredAs::native));
  std::map<std::string, std::string> dtypes;
  for (const auto& t : list_tensors(world(), path)) dtypes[t.name] = t.dtype;
  CHECK(dtypes == std::map<std::string, std::string>{{"d", "F64"},
                                                     {"d_bf16", "BF16"},
                                                     {"d_f16", "F16"},
                                                     {"d_f32", "F32"},
                                                     {"f", "F32"},
                                                     {"f_bf16", "BF16"},
                                                     {"f_f16", "F16"},
                                                     {"f_f64", "F64"}});
  // Every tensor into double, every one but the F64 ones into float, in other layouts and lengths.
  for (const auto& entry : dtypes) {
    const std::string& name = entry.first;  // (not a structured binding: CAPTURE's lambda takes it)
    const std::string& dtype = entry.second;
    CAPTURE(name);
    const bool from_float = name[0] == 'f';
    CHECK(test::all_ranks(
        loads_stored<double, Sharded<0>>(path, name, dtype, from_float, test::random_lengths(rng, n, 6))));
    CHECK(test::all_ranks(loads_stored<double, Replicated>(path, name, dtype, from_float, {})));
    if (dtype == "F64")
      CHECK_THROWS_WITH_AS(
          (load<float, Sharded<2>>(world(), path, name, test::random_lengths(rng, n, 4))),
          doctest::Contains("F64 in the file but float32 (F32) was asked for, which would round its values"),
          invalid_argument);
    else
      CHECK(test::all_ranks(
          loads_stored<float, Sharded<2>>(path, name, dtype, from_float, test::random_lengths(rng, n, 4))));
  }
  // The same bytes when one rank writes it all (the conversion is per element, wherever it happens).
  const std::string one = path_of("stored_by_one.safetensors"), many = path_of("stored_by_world.safetensors");
  save(many, TensorList().add("b", x32, StoredAs::bf16).add("h", x64, StoredAs::f16));
  const auto self = world().split(world().rank(), 0);
  if (world().rank() == 0) {
    const auto b = Tensor<float, Invariant>::from_function(
        self, g, [](std::span<const std::int64_t> idx) { return static_cast<float>(rounding_value(idx)); });
    save(one, TensorList()
                  .add("b", b, StoredAs::bf16)
                  .add("h", Tensor<double, Replicated>::from_function(self, g, rounding_value), StoredAs::f16));
  }
  world().barrier();
  CHECK(test::all_ranks(bytes_of(one) == bytes_of(many)));
  // A mesh tensor stored as BF16, loaded as float on the world.
  using dp = axis<"dp">;
  using tp = axis<"tp">;
  const int a = n % 2 == 0 ? 2 : 1;
  const Mesh<dp, tp> mesh(world(), {a, n / a});
  const auto whole64 = Tensor<double, Invariant>::from_function(world(), g, rounding_value);
  const auto mx = MeshTensor<double, Mesh<dp, tp>, per_axis<Sharded<0>, Sharded<2>>>::from_global(
      mesh, g, std::span<const double>(whole64.data(), static_cast<std::size_t>(whole64.size())),
      {test::random_lengths(rng, a, 6), test::random_lengths(rng, n / a, 4)});
  save(path_of("stored_mesh.safetensors"), TensorList().add("m", mx, StoredAs::bf16));
  CHECK(test::all_ranks(loads_stored<float, Sharded<1>>(path_of("stored_mesh.safetensors"), "m", "BF16", false,
                                                        test::random_lengths(rng, n, 5))));
}

}  // namespace shardex_test_checkpoint
