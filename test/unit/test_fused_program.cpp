// SPDX-License-Identifier: MIT
// The GPU's fused element-wise pass, checked on the CPU: a fused tree written
// out as a FusedProgram and run by its interpreter (the code the CUDA kernels
// run, compiled here for the host) gives the values and the gradients of the
// host's template loop.
#include <doctest/doctest.h>

#include <vector>

#include <shardex.hpp>

#include "support/dist.hpp"

// The file's own namespace: test/meson.build compiles several test files as one
// translation unit (a unity build), where their helpers must not meet.
namespace shardex_test_fused_program {

using namespace shardex;

namespace {

using R = Replicated;

template <class E, class... P>
void same_as_template_loop(const E& e, P&... params) {
  // The template loop (Host), values and gradients for a cotangent g.
  Tensor<double, R> y = e;
  const auto g = Tensor<double, Partial>::uniform(test::world(), y.shape(), 99);
  y.node()->grad = g;
  y.node()->propagate();
  const std::vector<Tensor<double, Partial>> want{params.grad().clone()...};
  (params.zero_grad(), ...);

  // The same tree as a program, run by the interpreter.
  auto tree = detail::bind(e);
  FusedProgram<double> program;
  tree.emit(program);
  CHECK(program.n_instrs == decltype(tree)::instrs);
  CHECK(program.n_leaves == decltype(tree)::leaves);
  for (std::int64_t i = 0; i < y.size(); ++i) CHECK(program.value_at(i) == doctest::Approx(y.data()[i]).epsilon(1e-14));
  tree.prepare(false);  // the interpreter accumulates, as the device pass does
  FusedProgram<double> backward;
  tree.emit(backward);  // now with the gradient buffers of the leaves
  for (std::int64_t i = 0; i < g.size(); ++i)
    backward.backprop_at(i, g.data()[i], [](double* d, double v, bool) { *d += v; });
  tree.flush();
  std::size_t k = 0;
  (
      [&] {
        const auto& got = params.grad();
        const auto& w = want[k++];
        REQUIRE(got.size() == w.size());
        for (std::int64_t i = 0; i < w.size(); ++i) CHECK(got.data()[i] == doctest::Approx(w.data()[i]).epsilon(1e-13));
      }(),
      ...);
}

}  // namespace

TEST_CASE("a fused tree as a FusedProgram gives the template loop's values and gradients") {
  const auto& comm = test::world();
  auto a = Tensor<double, R>::uniform(comm, {4, 5}, 1), b = Tensor<double, R>::uniform(comm, {4, 5}, 2),
       c = Tensor<double, R>::uniform(comm, {4, 5}, 3), bias = Tensor<double, R>::uniform(comm, {5}, 4);
  for (auto* t : {&a, &b, &c, &bias}) t->requires_grad();
  SUBCASE("every operation, a repeated operand and a broadcast bias") {
    same_as_template_loop(add_bias(gelu(a * b + c) - tanh(a) * 2.0 + exp(scale(b, 0.5)) + relu(c) - (-a), bias), a, b,
                          c, bias);
  }
  // Scale's factor and Shift's addend must reach the instruction (a fused
  // program once dropped Shift's, computing x + c as x).
  SUBCASE("a constant added") { same_as_template_loop(a + 1.5, a); }
  SUBCASE("constants scaled, added and subtracted") { same_as_template_loop(2.5 - scale(a, 3.0) * (b - 0.25), a, b); }
  SUBCASE("division, square roots and log, on positive arguments") {
    same_as_template_loop(a / (exp(b) + 1.0) + sqrt(exp(a)) * rsqrt(exp(c) + 0.5) + log(exp(b) + 2.0), a, b, c);
  }
  SUBCASE("the gates") { same_as_template_loop(sigmoid(a) * silu(b) - (-silu(c)), a, b, c); }
  SUBCASE("one operation") { same_as_template_loop(a * b, a, b); }
  SUBCASE("a unary chain") { same_as_template_loop(gelu(tanh(exp(a / 4.0))), a); }
}

TEST_CASE("a FusedProgram has room for 32 operations and 16 operands") {
  const auto& comm = test::world();
  auto x = Tensor<double, R>::ones(comm, {3});
  const auto e = x + x + x + x + x + x + x + x + x + x + x + x + x + x + x + x;  // 16 leaves, 31 instructions
  auto tree = detail::bind(e);
  static_assert(decltype(tree)::leaves == FusedProgram<double>::max_leaves);
  static_assert(decltype(tree)::instrs <= FusedProgram<double>::max_instrs);
  FusedProgram<double> p;
  tree.emit(p);
  CHECK(p.value_at(2) == 16.0);
}

}  // namespace shardex_test_fused_program
