// Test data shared by the compression suites.
#pragma once

#include <cmath>
#include <random>
#include <vector>

namespace geotrain::test {

inline std::vector<float> gaussian(size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<float> heavy_tailed(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> d(2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline double sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s;
}

}  // namespace geotrain::test
