// The median of a benchmark's repeats or latencies.

#ifndef KVTIER_SRC_COMMON_MEDIAN_H_
#define KVTIER_SRC_COMMON_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace kvtier {

// The middle value of `v` (not empty); of an even count, the upper of the two middle ones.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_MEDIAN_H_
