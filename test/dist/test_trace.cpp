// SPDX-License-Identifier: MIT
// The timeline trace: start, a known sequence of transitions (forward and
// backward), stop; the file on rank 0 must name every rank and hold every
// collective each rank made, and off a span must cost next to nothing.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <shardex.hpp>

#include "support/dist.hpp"

using namespace shardex;
using shardex::test::world;

namespace {
std::int64_t occurrences(const std::string& text, const std::string& what) {
  std::int64_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("trace: every collective of every rank is in the merged file, with its layouts and strategy") {
  const auto& comm = world();
  const int n = comm.size();
  std::int64_t pid = comm.rank() == 0 ? static_cast<std::int64_t>(getpid()) : 0;
  comm.broadcast(&pid, 1, 0);
  const std::string path = "/tmp/shardex_trace_test_" + std::to_string(pid) + ".json";
  REQUIRE(!trace::enabled());
  trace::start(path);
  CHECK(trace::enabled());
  std::vector<std::int64_t> lens(static_cast<std::size_t>(n), 2);
  lens[0] = 1;
  std::int64_t rows = 0;
  for (auto l : lens) rows += l;
  auto x = Tensor<double, Sharded<0>>::ones(comm, {rows, 3}, layout_mapping<Sharded<0>>(lens));
  auto w = Tensor<double, Invariant>::ones(comm, {3}).requires_grad();
  const Tensor<double, Replicated> g = all_gather(x);  // collective 1 (per_root, padded or v)
  const auto p = Tensor<double, Partial>::ones(comm, {4});
  const Tensor<double, Replicated> r = all_reduce(p);        // collective 2
  const auto s = eager::dynamic_slice<Sharded<0>>(g, lens);  // local
  Tensor<double, Replicated> loss = sum(replicate(w));       // local forward ...
  backward(loss);                                            // ... its adjoint: collective 3
  const auto w2 = Tensor<double, Replicated>::ones(comm, {3, 2});
  const Tensor<double, Replicated> m = matmul(g, w2), e = g * g + g;  // spans named by their roots
  const std::int64_t written = trace::stop();
  CHECK(!trace::enabled());
  (void)s;
  (void)r;
  (void)m;
  (void)e;
  if (comm.rank() == 0) {
    std::ifstream in(path);
    REQUIRE(in.good());
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    CHECK(text.rfind("{\"displayTimeUnit\"", 0) == 0);
    CHECK(occurrences(text, "\"name\":\"process_name\"") == n);
    for (int rank = 0; rank < n; ++rank)
      CHECK(occurrences(text, "\"args\":{\"name\":\"rank " + std::to_string(rank) + "\"}") == 1);
    CHECK(occurrences(text, "\"cat\":\"collective\"") == 3 * n);
    CHECK(occurrences(text, "\"name\":\"all_gather\",\"cat\":\"collective\"") == n);
    CHECK(occurrences(text, "\"name\":\"all_reduce\",\"cat\":\"collective\"") ==
          2 * n);  // forward, and replicate's adjoint
    CHECK(occurrences(text, "\"name\":\"slice\",\"cat\":\"local\"") == n);
    CHECK(occurrences(text, "\"name\":\"backward(loss)\",\"cat\":\"backward\"") == n);
    // Evaluated expressions by their roots: the sum, the product, the element-wise tree's outer op.
    CHECK(occurrences(text, "\"name\":\"sum\",\"cat\":\"eval\"") == n);
    CHECK(occurrences(text, "\"name\":\"matmul\",\"cat\":\"eval\"") == n);
    CHECK(occurrences(text, "\"name\":\"add\",\"cat\":\"eval\"") == n);
    CHECK(occurrences(text, "\"name\":\"all_gather\",\"cat\":\"eval\"") == n);  // around its collective
    CHECK(occurrences(text, "\"from\":\"S(0)" + to_string(std::span<const std::int64_t>(lens)) + "\"") >= n);
    CHECK(occurrences(text, "\"strategy\":\"") == 3 * n);
    CHECK(written == occurrences(text, "\"ph\":\"X\""));
    std::remove(path.c_str());
  }
  // Stopped: nothing more is recorded.
  {
    trace::Span sp("local", "after stop");
    CHECK(!sp.on());
  }
}

TEST_CASE("trace: names and args with quotes, backslashes, control characters and UTF-8 are read back as they were") {
  const auto& comm = world();
  std::int64_t pid = comm.rank() == 0 ? static_cast<std::int64_t>(getpid()) : 0;
  comm.broadcast(&pid, 1, 0);
  const std::string path = "/tmp/shardex_trace_names_" + std::to_string(pid) + ".json";
  // The same text as test_checkpoint's escaped name: one escaper (src/json_text.hpp) for both files.
  const std::string name = "q\"b\\n\nt\t\x01\x1f\x7f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  const std::string bad = "bad\xff";  // not UTF-8: written as U+FFFD, the file stays JSON
  trace::start(path);
  {
    trace::Span sp("local", name.c_str());
    sp.set_args(trace::json_string_member("note", name) + "," + trace::json_string_member(name.c_str(), bad));
  }
  { trace::Span sp("local", bad.c_str()); }
  trace::stop();
  if (comm.rank() == 0) {
    std::ifstream in(path);
    REQUIRE(in.good());
    const nlohmann::json doc = nlohmann::json::parse(in);  // throws if the file is not JSON
    int named = 0, replaced = 0;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("name") == name) {
        ++named;
        CHECK(e.at("args").at("note") == name);
        CHECK(e.at("args").at(name) == "bad\xef\xbf\xbd");
      }
      if (e.at("name") == "bad\xef\xbf\xbd") ++replaced;
    }
    CHECK(named == comm.size());
    CHECK(replaced == comm.size());
    // The run's GEMM kernel per shape class (device/host/gemm_kernels.hpp), as the ranks agreed on it.
    const auto& kernels = doc.at("otherData").at("gemm_kernels");
    CHECK(kernels.at("measured") == host::gemm_kernels().measured);
    CHECK(kernels.at("tuned_steps") == host::gemm_kernels().tuned_steps);
    CHECK(kernels.size() == 35);  // "measured", "tuned_steps", "blas_core" and 32 classes
    CHECK(kernels.at("blas_core") == host::blas_core());
    CHECK(kernels.at("double NT large") ==
          host::kernel_name(host::gemm_kernel(GemmShape::plain(300, 300, 300, false, true), 8)));
    std::remove(path.c_str());
  }
}

TEST_CASE("trace: off, a span costs a few nanoseconds" * doctest::skip(test::sanitized)) {
  REQUIRE(!trace::enabled());
  const int spans = 2'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < spans; ++i) {
    trace::Span sp("local", "nothing");
    if (sp.on()) sp.set_args("");
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / spans;
  MESSAGE("a span with tracing off: " << ns << " ns");
  CHECK(ns < 50);  // a relaxed atomic load; a step of the MLP makes tens of spans and takes milliseconds
}
