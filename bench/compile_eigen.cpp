// SPDX-License-Identifier: MIT
// The same MLP as compile_dsl.cpp, forward and backward by hand with plain
// Eigen on one process, in float and double: the baseline of
// bench/compile_time.py.
#include <cmath>
#include <iostream>

#include <Eigen/Core>

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
T gelu(T a) {
  return T(0.5) * a * (T(1) + std::tanh(T(0.7978845608028654) * (a + T(0.044715) * a * a * a)));
}
template <class T>
T dgelu(T a) {
  const T t = std::tanh(T(0.7978845608028654) * (a + T(0.044715) * a * a * a));
  return T(0.5) * (T(1) + t) + T(0.5) * a * (T(1) - t * t) * T(0.7978845608028654) * (T(1) + T(3 * 0.044715) * a * a);
}

template <class T>
T mlp(unsigned seed) {
  std::srand(seed);
  Mat<T> x = Mat<T>::Random(8, 12), a = Mat<T>::Random(12, 16) * T(0.1), b = Mat<T>::Random(16, 12) * T(0.1);
  Eigen::Matrix<T, 1, Eigen::Dynamic> ab = Eigen::Matrix<T, 1, Eigen::Dynamic>::Zero(16);
  Eigen::Matrix<T, 1, Eigen::Dynamic> bb = Eigen::Matrix<T, 1, Eigen::Dynamic>::Zero(12);
  Mat<T> z = (x * a).rowwise() + ab;
  Mat<T> h = z.unaryExpr([](T v) { return gelu(v); });
  Mat<T> y = (h * b).rowwise() + bb;
  Mat<T> target = Mat<T>::Random(8, 12);
  Mat<T> d = y - target;
  const T loss = d.squaredNorm() / T(2);
  Mat<T> dh = d * b.transpose();
  Mat<T> dz = dh.cwiseProduct(z.unaryExpr([](T v) { return dgelu(v); }));
  Mat<T> da = x.transpose() * dz, db = h.transpose() * d;
  Mat<T> t = Mat<T>::Ones(16, 16).transpose().transpose();
  Mat<T> s = (-(t * T(0.5))).array().exp().max(T(0)).tanh().matrix().rowwise().sum();
  std::cout << da.sum() + db.sum() + dz.colwise().sum().sum() + d.colwise().sum().sum() + s.sum() << "\n";
  return loss;
}

int main() { std::cout << mlp<float>(1) + mlp<double>(2) << "\n"; }
