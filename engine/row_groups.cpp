// Product groups of a layer pass (see row_groups.h for why rows are grouped).
#include "engine/row_groups.h"

#include <algorithm>

#include "kernels/ops.h"

namespace cedar {

namespace k = kernels;

namespace {
constexpr int kFewRows = 16;  // kernels/cpu_internal.h kFewRowsMax: rows summed alone up to here
}  // namespace

std::vector<int> ProductGroups(std::span<const int> rows_of_segment) {
  int n = 0, used = 0;
  for (int r : rows_of_segment) {
    n += r;
    used += r > 0;
  }
  if (k::RowInvariantMatmul() || used <= 1 || n <= kFewRows) return {0, n};
  std::vector<int> b{0};
  int at = 0, run = 0;  // run: rows in the open group of one-row segments (0: none open)
  for (int r : rows_of_segment) {
    if (r == 0) continue;
    if (r == 1 && run > 0 && run < kFewRows) {
      b.back() = at + 1;
      ++run;
    } else {
      b.push_back(at + r);
      run = r == 1 ? 1 : 0;
    }
    at += r;
  }
  return b;
}

void MatmulGroups(const float* x, const k::WeightView& w, float* y, std::span<const int> bounds) {
  const int G = int(bounds.size()) - 1;
  if (G <= 0) return;
  if (G == 1) return k::MatmulW(x, w, y, bounds[1] - bounds[0]);
  std::vector<k::MatmulJob> jobs;
  for (int g = 0; g < G; ++g)
    jobs.push_back(k::JobW(x + size_t(bounds[size_t(g)]) * w.cols, w, y + size_t(bounds[size_t(g)]) * w.rows,
                           bounds[size_t(g) + 1] - bounds[size_t(g)]));
  k::MatmulMany(jobs.data(), G);
}

void MatmulGroups(const float* x, const float* w, float* y, int in, int out, std::span<const int> bounds) {
  const int G = int(bounds.size()) - 1;
  if (G <= 0) return;
  if (G == 1) return k::Matmul(x, w, y, bounds[1] - bounds[0], in, out);
  std::vector<k::MatmulJob> jobs;
  for (int g = 0; g < G; ++g)
    jobs.push_back(k::MatmulJob{x + size_t(bounds[size_t(g)]) * in, w, y + size_t(bounds[size_t(g)]) * out,
                                bounds[size_t(g) + 1] - bounds[size_t(g)], in, out});
  k::MatmulMany(jobs.data(), G);
}

}  // namespace cedar
