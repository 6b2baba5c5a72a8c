// The many-row F32 product (prefill): y[n, out] = x[n, in] * W[out, in]^T for n above
// kFewRowsMax, where OpenBLAS's sgemm ran at ~0.7 of its own rate on this model's small
// shapes (out 128-1024, in 256-512, experts of ~128 rows): every call re-packed the weights,
// every thread's call re-packed all of x, and beta = 0 made it zero y in a pass of its own.
//
// This kernel packs nothing but x, once per block of rows, and reads W in place: a register
// tile of 6 outputs x 16 rows (12 AVX2 accumulators, the weights broadcast from their rows,
// x from a packed panel [in][16]) runs over all of K and writes y directly; where the build
// targets AVX-512, a tile of 6 outputs x 48 rows (18 16-lane accumulators: each broadcast feeds
// three FMAs) does, ~2x sgemm's rate on small's shapes (bench_gemm). Threads claim blocks of
// rows (MatmulMany), so each packs only its own rows. A build without AVX2 and FMA runs the AVX2
// tile where the CPU has AVX2 (kernels/avx2_runtime.h), and elsewhere a plain kernel with the same
// FMA chains, not sgemm.
//
// Summation order: every output is one FMA chain over k = 0, 1, ..., in - 1 starting from
// +0.0f. It does not depend on n, on the row's position, or on which rows or columns a call
// computes, so chunked prefill equals whole prefill here too (it is not MatVec's lane-16
// order: decode rows do not equal prefill rows bit for bit, as with sgemm before;
// --row-invariant-matmul is the mode where they do). ref::GemmPrefillRows is the scalar twin,
// bitwise equal.
#pragma once
#include <cstddef>
#include <vector>

namespace cedar::kernels::internal {

// Rows of x claimed as one unit of work (3 panels of 16): the 6-output weight block a tile
// reads stays in L1 while it runs against each panel.
constexpr int kPrefillRowBlock = 48;

// Rows [r0, r1) of y[n, out] (row stride y_stride) = x[n, in] . W[out, in]^T, all out columns,
// on the calling thread. in == 0 writes zeros.
void GemmPrefillRows(const float* x, const float* w, float* y, int in, int out, int y_stride, int r0, int r1);

// x's rows packed once into GemmPrefillRows' panels (16 rows each, [in][16], 64-byte aligned),
// for a product whose weights arrive panel by panel: the typed-weight prefill decodes ~4 MiB of
// weight rows at a time (matmul_quant.cpp), and packing all of x again for every such panel was
// ~13% of a BF16 prefill product (perf of `cedar bench`, medium, 512 rows, ~1 MiB panels then). Pack once per
// product, then every weight panel, on any thread, reads the same packed rows.
class PackedRows {
 public:
  // Packs x[n, in] (n >= 1, in >= 1), the panels split over the pool (ParallelFor).
  void Pack(const float* x, int n, int in);
  int n() const { return n_; }
  int in() const { return in_; }
  const float* x() const { return x_; }  // the rows as given (the scalar fallback reads them)
  size_t panel_floats() const { return size_t(in_) * 16; }
  const float* panel(int i) const { return base_ + size_t(i) * panel_floats(); }  // rows [16 i, 16 i + 16)

 private:
  std::vector<float> buf_;  // grown, never shrunk: reused across products
  float* base_ = nullptr;   // buf_'s first 64-byte aligned float
  const float* x_ = nullptr;
  int n_ = 0, in_ = 0;
};

// GemmPrefillRows(px.x(), w, y, px.in(), out, y_stride, 0, px.n()) on rows packed beforehand:
// the same tiles and the same bits (one FMA chain per output), without packing.
void GemmPackedRows(const PackedRows& px, const float* w, float* y, int out, int y_stride);

namespace ref {
// GemmPrefillRows' scalar twin (the same FMA chain per output): bitwise equal to it.
void GemmPrefillRows(const float* x, const float* w, float* y, int in, int out, int y_stride, int r0, int r1);
}  // namespace ref

}  // namespace cedar::kernels::internal
