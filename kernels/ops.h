// CPU math kernels used by the engine. Every op has two implementations with the same
// signature: `cedar::kernels::ref` (plain scalar loops, the reference) and
// `cedar::kernels` (the fast CPU version: OpenBLAS sgemm and vectorised loops).
// tests/kernels_test.cpp runs one table of cases against both and reports the worst element.
// Row-major everywhere; weights are [out, in] like torch.nn.Linear.
#pragma once
#include <cstdint>

#include "kernels/weight_view.h"

namespace cedar::kernels {

// y[n, out] = x[n, in] * w[out, in]^T
void Matmul(const float* x, const float* w, float* y, int n, int in, int out);
// y[n, out] += x[n, in] * w[out, in]^T
void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out);
// Several independent products y_j = x_j w_j^T in one pass of the thread pool: each thread
// takes a share of every product's output columns, balanced by work. Decode runs a layer's
// expert products this way (one hand-off instead of one per product).
struct MatmulJob {
  const float* x = nullptr;  // [n, in]
  const float* w = nullptr;  // [out, in]
  float* y = nullptr;        // [n, out]
  int n = 0, in = 0, out = 0;
  // A typed weight (BF16, INT8, FP8, FP4: kernels/weight_view.h) used instead of `w` when its type
  // is not F32 (then w is null); an F32 job ignores it and runs today's path.
  WeightView wv{};
};
void MatmulMany(const MatmulJob* jobs, int n_jobs);
// The job y[n, w.rows] = x[n, w.cols] w^T for a typed weight: an F32 view fills `w` (today's path),
// any other type `wv`.
inline MatmulJob JobW(const float* x, const WeightView& w, float* y, int n) {
  MatmulJob j{x, nullptr, y, n, int(w.cols), int(w.rows)};
  if (w.type == WeightType::kF32)
    j.w = static_cast<const float*>(w.data);
  else
    j.wv = w;
  return j;
}

// Row-wise RMSNorm: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.  x, y: [n, dim]; may alias.
void RmsNorm(const float* x, const float* weight, float* y, int n, int dim, float eps);
// Interleaved RoPE on the last rope_dim dims of each vector. x: [n_rows, n_vecs, vec_dim];
// row r is rotated by angle positions[r] * base^(-2i/rope_dim) for pair i (sign -1: inverse).
void Rope(float* x, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
          float base, int sign);
// In-place softmax of x[n].
void Softmax(float* x, int n);
float Dot(const float* a, const float* b, int n);
// out[i] = SiLU(min(g[i], limit)) * clamp(u[i], -limit, limit); limit <= 0: no clamp.
void SwiGLU(const float* g, const float* u, float* out, int n, float limit);

// One query row of sink attention over two entry sources (entries are both key and value):
//   window entries win[n_win, dim] (contiguous) and selected pool entries pool[sel[i], dim].
// For each head h: o_h = sum_e exp(q_h.e*scale) e / (sum_e exp(q_h.e*scale) + exp(sink[h])).
// q, out: [n_heads, dim].
void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out);

// Indexer scores for a batch of query rows against keys:
//   scores[r, j] = sum_h w[r, h] * ReLU(q[r, h, :] . keys[j, :])
// q: [n_rows, n_heads, head_dim], w: [n_rows, n_heads], keys: [n_keys, head_dim],
// scores: [n_rows, n_keys] (every key is scored; the caller masks what a row cannot see).
void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores);

// Indices of the k largest scores[0..n) (ties toward the lower index), sorted ascending by
// index; returns how many were written (min(k, n)). Entries equal to -inf are never chosen.
int TopK(const float* scores, int n, int k, int32_t* out);

namespace ref {
void MatmulMany(const MatmulJob* jobs, int n_jobs);
void Matmul(const float* x, const float* w, float* y, int n, int in, int out);
void MatmulAccumulate(const float* x, const float* w, float* y, int n, int in, int out);
void RmsNorm(const float* x, const float* weight, float* y, int n, int dim, float eps);
void Rope(float* x, int n_rows, int n_vecs, int vec_dim, int rope_dim, const int64_t* positions,
          float base, int sign);
void Softmax(float* x, int n);
float Dot(const float* a, const float* b, int n);
void SwiGLU(const float* g, const float* u, float* out, int n, float limit);
void SinkAttention(const float* q, int n_heads, int dim, const float* win, int n_win,
                   const float* pool, const int32_t* sel, int n_sel, const float* sink,
                   float scale, float* out);
void IndexScores(const float* q, const float* w, const float* keys, int n_rows, int n_heads,
                 int head_dim, int n_keys, float* scores);
int TopK(const float* scores, int n, int k, int32_t* out);
}  // namespace ref

// Products of more than 16 rows on the row-invariant GEMM (kernels/gemm_rowinv.h) instead of
// OpenBLAS sgemm: every row of every product then equals the one-row product (decode) of that
// row bit for bit, whatever else shares the product, which a step scheduler needs to put decode
// rows and several turns' prefill chunks into one pass without changing any result. Costs
// ~20% of those products' rate on AVX2 (bench_gemm: 0.65-0.86x sgemm on small's shapes), so
// it is off by default. Process-wide; set it before products run, not during.
void SetRowInvariantMatmul(bool on);
bool RowInvariantMatmul();

// INT8 and FP4 weights' decode and batched-decode products (up to 16 rows) on 8-bit activations: each row
// of x quantised per block of 32 (s = amax / 127) and the blocks' dot products in integers
// (AVX-512 VNNI, or AVX2's vpmaddubsw; a scalar loop with the same bits elsewhere; FP4 read as the
// INT8 weight 2 * e2m1 with half its scale, exactly). About twice the INT8 decode rate on VNNI cores, at the accuracy cost docs/WEIGHTS.md measures; prefill (more rows) keeps F32
// activations. Off by default. Process-wide; set it before products run, not during.
void SetInt8Activations(bool on);
bool Int8Activations();
// Whether this build runs them vectorised (AVX-512 VNNI or AVX2); false: on the scalar reference
// loop (same bits, far slower than the F32-activation kernels), so the flags that turn it on keep
// F32 activations there (engine/activation_modes.h).
bool Int8ActivationsVectorised();

// FP8, FP4 and INT8 weights' decode and batched-decode products (up to 16 rows) on BF16
// activations: each row of x rounded to bf16 once (round to nearest even) and the blocks' dot
// products on AVX-512 BF16 (vdpbf16ps; the weights are exact in bf16), in the order
// kernels/matmul_bf16a.cpp defines (a scalar loop with the same bits without AVX-512 BF16 + VBMI).
// Faster FP8 / FP4 / INT8 decode products at the accuracy cost docs/WEIGHTS.md measures; prefill
// (more rows) keeps F32 activations. Where SetInt8Activations is on too, FP4 takes BF16
// activations and INT8 keeps 8-bit ones; inputs that are not a multiple of 64 keep F32. Off by default. Process-wide; set it before
// products run, not during.
void SetBf16Activations(bool on);
bool Bf16Activations();
bool Bf16ActivationsVectorised();  // AVX-512 BF16 + VBMI kernel compiled in (else the scalar loop)

// FP8 weights' decode and batched-decode products on AVX2 without AVX-512 read x times 2^120 (once
// per product, where every |x| < 2^8) and leave out a multiply per weight: the same bits
// (kernels/matmul_quant.cpp, DecFp8X). On by default; off only to measure it (bench_decode_ab
// fp8x=0). Process-wide; set it before products run, not during.
void SetFp8PrescaledActivations(bool on);

// Sets the BLAS thread count (0 = library default). Our own loops are single-threaded.
void SetThreads(int n);

}  // namespace cedar::kernels
