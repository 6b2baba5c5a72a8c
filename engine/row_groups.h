// Which output rows of a layer pass share a weight product (issue 14).
//
// A pass over several segments (engine/forward.h RunLayerSegments: several turns' prefill
// chunks, decode rows riding beside a chunk) must leave every row with the bits it gets when
// its own call runs alone. The kernels pick their summation order from a product's row count:
// up to 16 rows the few-row kernels (MatVec's lane-16 order, whatever the other rows), above
// it the prefill GEMM (one FMA chain per output). So unless kernels::RowInvariantMatmul() makes
// every product sum in the lane-16 order, a chunk's rows may not share a product with other
// rows: each segment of more than one row gets products of its own, and one-row segments
// (decode rows, a one-token chunk) share them in groups of at most 16, where every row is
// summed alone. The groups' products still run back to back in one pool pass per site, so a
// layer's weights come from cache for every group after the first (the point of riding decode
// rows in a prefill pass: the encoder half of a decode step stops streaming its weights).
#pragma once
#include <span>
#include <vector>

#include "kernels/weight_view.h"

namespace cedar {

// Bounds [G + 1] of the groups over rows [0, sum(rows_of_segment)): group g is rows
// [b[g], b[g + 1]). One group when row-invariant matmul is on, when one segment has rows, or
// when there are at most 16 rows in all (every row summed alone anyway). So a decode batch of
// more than 16 rows runs in groups of 16, as the mixed scheduler's decode steps always did, and
// its rows are the bits they are alone. Empty segments count no rows.
std::vector<int> ProductGroups(std::span<const int> rows_of_segment);

// y[n, w.rows] = x[n, w.cols] w^T, each group of `bounds` its own product, all in one pool pass
// (one group: exactly kernels::MatmulW).
void MatmulGroups(const float* x, const kernels::WeightView& w, float* y, std::span<const int> bounds);

// The same for a plain F32 weight w[out, in] (exactly kernels::Matmul for one group).
void MatmulGroups(const float* x, const float* w, float* y, int in, int out, std::span<const int> bounds);

}  // namespace cedar
