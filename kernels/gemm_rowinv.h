// Row-invariant packed GEMM: y[n, out] = x[n, in] * W[out, in]^T where every output is summed
// in one fixed order (the "lane-16 order", below) that does not depend on n, on the row's
// position among the n rows, or on which columns a call computes. So row r of a many-row
// product equals the one-row product (MatVec, decode) of that row alone, bit for bit: a
// scheduler may put decode rows inside a prefill's products, or batch several turns' prefill
// chunks, without changing any result.
//
// The lane-16 order (what MatVec's AVX-512 path has always done, and what every CPU path now
// does): with K = in rounded up to a multiple of 16 and x, w zero-padded to K,
//   acc[j] = fma chain over k = j, j + 16, j + 32, ... < K (ascending, starting from +0.0f)
//   t[i] = acc[i] + acc[i + 8] (i < 8); u[i] = t[i] + t[i + 4] (i < 4);
//   y = (u[0] + u[2]) + (u[1] + u[3])
// (the last three lines are GCC's _mm512_reduce_add_ps). ref::DotLane16 is the scalar
// definition; the AVX2 kernel (two 8-lane passes) and the AVX-512 one (one 16-lane pass, built
// where the compiler targets AVX-512) reproduce it exactly.
//
// Weights come through a panel decoder, so quantised storage (BF16, INT8, FP8, FP4) converts
// each weight panel to F32 once per panel and reuses it for all n rows.
#pragma once

namespace cedar::kernels {

// A source of F32 weight panels for W[out, in].
struct WeightPanelSource {
  // Writes W[row0 .. row0 + nrows, k0 .. k0 + nk) as F32 into dst[nrows, nk] (row-major,
  // leading dimension nk). The GEMM asks for panels with k0 a multiple of 16 and never past
  // `in` (it pads K itself). Must be a pure function of its arguments (called from several
  // threads at once). A one-row kernel for the same storage is row-invariant with this GEMM
  // when it sums the decoded values in the lane-16 order.
  void (*decode)(const WeightPanelSource& src, int row0, int nrows, int k0, int nk, float* dst) = nullptr;
  const void* ctx = nullptr;  // the decoder's storage (F32Panels: the float weights [out, in])
  int out = 0;                // rows of W (output columns of y)
  int in = 0;                 // columns of W (the summed dimension)
};

// The F32 source: W is a row-major float [out, in] array.
WeightPanelSource F32Panels(const float* w, int out, int in);

// Columns [col0, col1) of y[n, y_stride] (y[r * y_stride + c]) = x[n, w.in] . W[c, :], on the
// calling thread (callers parallelise over column slices, as MatmulMany does).
void GemmRowInvariant(const float* x, int n, const WeightPanelSource& w, float* y, int y_stride, int col0,
                      int col1);

// All columns of y[n, out] = x[n, in] * w[out, in]^T for F32 weights, split over the thread pool.
void MatmulRowInvariant(const float* x, const float* w, float* y, int n, int in, int out);

namespace ref {
// One output in the lane-16 order (the definition above), scalar.
float DotLane16(const float* w, const float* x, int in);
// GemmRowInvariant's scalar twin: bitwise equal to it (not merely within tolerance).
void GemmRowInvariant(const float* x, int n, const WeightPanelSource& w, float* y, int y_stride, int col0,
                      int col1);
}  // namespace ref

}  // namespace cedar::kernels
