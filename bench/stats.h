// Order statistics the benchmarks report.
#pragma once
#include <algorithm>
#include <vector>

namespace ragkv {

// The median of v (the upper one of the two middle values for an even count); 0 when empty.
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace ragkv
