// Kernel benchmark of kernels/cuda at V4.1-Flash sizes (dim 5120, 64 heads of 512, RoPE 64,
// indexer 32 x 128 with top-512, window 128, 384 experts top-6 of 2304). Prints one JSON
// object per line: first the device and its two ceilings measured in this run (copy-kernel
// bandwidth, cuBLAS BF16 GEMM rate on random data), then per kernel the median time of
// `reps` launches (CUDA events, after warm-up) with the bytes it must move at least (each
// input read once, each output written once) and, for products, its FLOP; gb_s / frac_bw and
// tflop_s / frac_matmul compare them with the ceilings. Correctness is the gpu tests' job.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"

namespace cu = cedar::kernels::cuda;
using cu::DType;

namespace {

#define BENCH_CHECK(expr)                                                                    \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("{\"error\": \"%s: %s\"}\n", #expr, cudaGetErrorString(e_));               \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

double g_bw_gbs = 0, g_mm_tflops = 0;  // the ceilings, measured first
int g_reps = 20;

// Deterministic pseudo-random values in [-scale, scale).
__device__ float Hash01(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return float(x >> 40) / float(1 << 24) * 2.0f - 1.0f;
}
template <typename T>
__global__ void FillKernel(T* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = T(Hash01(uint64_t(i), seed) * scale);
}
__global__ void FillIntKernel(int32_t* p, int64_t n, int32_t mod, int32_t step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = int32_t((i * step) % mod);
}
__global__ void CopyKernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// A device buffer filled with random values of `t` (or int32 values (i·step) mod `mod`).
struct Buf {
  cu::DeviceBuffer b;
  void* p() const { return b.get(); }
  float* f() const { return b.as<float>(); }
  int32_t* i() const { return b.as<int32_t>(); }
};
Buf Make(int64_t n, DType t, uint32_t seed, float scale = 1.0f) {
  Buf x;
  if (!x.b.Allocate(size_t(n) * cu::SizeOf(t)).ok()) {
    std::printf("{\"error\": \"allocation of %lld elements failed\"}\n", (long long)n);
    std::exit(1);
  }
  if (t == DType::kF32) FillKernel<float><<<4096, 256>>>(x.f(), n, seed, scale);
  else FillKernel<__nv_bfloat16><<<4096, 256>>>(static_cast<__nv_bfloat16*>(x.p()), n, seed, scale);
  BENCH_CHECK(cudaGetLastError());
  return x;
}
Buf MakeInt(int64_t n, int32_t mod, int32_t step) {
  Buf x;
  if (!x.b.Allocate(size_t(n) * 4).ok()) std::exit(1);
  FillIntKernel<<<4096, 256>>>(x.i(), n, mod, step);
  BENCH_CHECK(cudaGetLastError());
  return x;
}

Buf Ints(const std::vector<int32_t>& v) {
  Buf x;
  if (!x.b.Allocate(v.size() * 4).ok() || !cu::CopyToDevice(x.p(), v.data(), v.size() * 4).ok()) std::exit(1);
  return x;
}

// Median milliseconds of one call of f over g_reps timed calls after 3 warm-ups.
double MedianMs(const std::function<cu::Status()>& f, std::string* error) {
  for (int i = 0; i < 3; ++i) {
    const cu::Status st = f();
    if (!st.ok()) {
      *error = st.ToString();
      return 0;
    }
  }
  BENCH_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < g_reps; ++i) {
    BENCH_CHECK(cudaEventRecord(a));
    f();
    BENCH_CHECK(cudaEventRecord(b));
    BENCH_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) *error = cudaGetErrorString(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One JSON line for a kernel: bytes = fewest bytes it must move, flop = 0 when not a product.
void Report(const char* kernel, const std::string& shape, const char* dtype, double bytes, double flop,
            const std::function<cu::Status()>& f) {
  std::string error;
  const double ms = MedianMs(f, &error);
  if (!error.empty()) {
    std::printf("{\"kernel\": \"%s\", \"shape\": \"%s\", \"error\": \"%s\"}\n", kernel, shape.c_str(), error.c_str());
    std::fflush(stdout);
    return;
  }
  const double s = ms * 1e-3, gbs = bytes / s / 1e9, tfs = flop / s / 1e12;
  std::printf("{\"kernel\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"ms\": %.4f, \"bytes\": %.0f, \"gb_s\": %.1f, "
              "\"frac_bw\": %.3f",
              kernel, shape.c_str(), dtype, ms, bytes, gbs, g_bw_gbs > 0 ? gbs / g_bw_gbs : 0.0);
  if (flop > 0)
    std::printf(", \"flop\": %.0f, \"tflop_s\": %.2f, \"frac_matmul\": %.3f", flop, tfs,
                g_mm_tflops > 0 ? tfs / g_mm_tflops : 0.0);
  std::printf("}\n");
  std::fflush(stdout);
}

void Ceilings() {
  // Memory bandwidth: a float4 copy kernel over 2 x 1 GiB, counting bytes read + written.
  const int64_t n4 = (int64_t(1) << 30) / 16;
  Buf src = Make(n4 * 4, DType::kF32, 1), dst = Make(n4 * 4, DType::kF32, 2);
  std::string err;
  const double ms = MedianMs([&] {
    CopyKernel<<<132 * 16, 512>>>(static_cast<const float4*>(src.p()), static_cast<float4*>(dst.p()), n4);
    return cu::Status{};
  }, &err);
  g_bw_gbs = 2.0 * n4 * 16 / (ms * 1e-3) / 1e9;
  const double ms_memcpy = MedianMs([&] {
    BENCH_CHECK(cudaMemcpyAsync(dst.p(), src.p(), size_t(n4) * 16, cudaMemcpyDeviceToDevice));
    return cu::Status{};
  }, &err);
  std::printf("{\"ceiling\": \"memory_bandwidth\", \"method\": \"float4 copy kernel, 1 GiB -> 1 GiB\", \"ms\": %.4f, "
              "\"gb_s\": %.1f, \"memcpy_gb_s\": %.1f}\n",
              ms, g_bw_gbs, 2.0 * n4 * 16 / (ms_memcpy * 1e-3) / 1e9);
  // Matrix rate: cuBLAS BF16 GEMM 8192^3 on random data, F32 accumulation, BF16 output.
  const int m = 8192;
  Buf a = Make(int64_t(m) * m, DType::kBF16, 3), b = Make(int64_t(m) * m, DType::kBF16, 4), c = Make(int64_t(m) * m, DType::kBF16, 5);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(1);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms_mm = MedianMs([&] {
    const cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &alpha, a.p(), CUDA_R_16BF, m, b.p(),
                                          CUDA_R_16BF, m, &beta, c.p(), CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? cu::Status{} : cu::Status{cu::Status::kCublas, int(s), "cublasGemmEx"};
  }, &err);
  g_mm_tflops = 2.0 * m * m * m / (ms_mm * 1e-3) / 1e12;
  std::printf("{\"ceiling\": \"matmul_bf16\", \"method\": \"cublasGemmEx 8192^3 bf16, f32 accumulate, random data\", "
              "\"ms\": %.4f, \"tflop_s\": %.1f%s%s}\n",
              ms_mm, g_mm_tflops, err.empty() ? "" : ", \"error\": ", err.empty() ? "" : ("\"" + err + "\"").c_str());
  cublasDestroy(h);
  std::fflush(stdout);
}

std::string S(std::initializer_list<long long> dims) {
  std::string s;
  for (long long d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::max(3, std::atoi(argv[1]));
  int count = 0;
  if (!cu::DeviceCount(&count).ok() || count == 0) {
    std::printf("{\"skip\": \"no CUDA device\"}\n");
    return 77;
  }
  cu::DeviceInfo info;
  if (cu::GetDeviceInfo(0, &info).ok())
    std::printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, \"l2_mib\": %.0f, \"mem_gib\": %.1f, \"reps\": %d}\n",
                info.name.c_str(), info.major, info.minor, info.multiprocessors, info.l2_bytes / 1048576.0,
                info.global_bytes / 1073741824.0, g_reps);
  Ceilings();
  cu::Blas blas;
  if (!blas.Init().ok()) return 1;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const double B2 = 2, B4 = 4;

  {  // RMSNorm over the residual stream
    const int n = 16384, d = 5120;
    Buf x = Make(int64_t(n) * d, bf, 10), w = Make(d, bf, 11), y = Make(int64_t(n) * d, bf, 12);
    Report("rms_norm", S({n, d}), "bf16", 2.0 * n * d * B2, 0, [&] { return cu::RmsNorm(x.p(), bf, w.p(), bf, y.p(), bf, n, d, 1e-6f, nullptr); });
    Buf xf = Make(int64_t(n) * d, f32, 13), yf = Make(int64_t(n) * d, f32, 14);
    Report("rms_norm", S({n, d}), "f32", 2.0 * n * d * B4, 0, [&] { return cu::RmsNorm(xf.p(), f32, w.p(), bf, yf.p(), f32, n, d, 1e-6f, nullptr); });
  }
  {  // RoPE on the queries: 64 heads of 512, last 64 dims
    const int n = 16384, H = 64, c = 512, r = 64;
    Buf q = Make(int64_t(n) * H * c, bf, 20);
    Report("rope", S({n, H, c}) + " r=64", "bf16", 2.0 * n * H * r * B2, 0,
           [&] { return cu::Rope(q.p(), bf, n, H, c, r, nullptr, 1000, 1, 160000.0f, 1, nullptr); });
  }
  {  // SwiGLU on the halves of the stacked W1|W3 product
    const int n = 16384, inter = 2304;
    Buf gu = Make(int64_t(n) * 2 * inter, bf, 30), out = Make(int64_t(n) * inter, bf, 31);
    Report("swiglu", S({n, inter}), "bf16", 3.0 * n * inter * B2, 0, [&] {
      return cu::SwiGLU(gu.p(), static_cast<char*>(gu.p()) + inter * 2, bf, out.p(), bf, n, inter, 2 * inter, inter, 10.0f, nullptr);
    });
  }
  {  // Compressor m = 2
    const int groups = 65536, c = 512;
    Buf C = Make(int64_t(2) * groups * c, bf, 40), Z = Make(int64_t(2) * groups * c, bf, 41), w = Make(c, bf, 42),
        out = Make(int64_t(groups) * c, bf, 43);
    Report("compress_pairs", S({groups, c}), "bf16", 5.0 * groups * c * B2, 0,
           [&] { return cu::CompressPairs(C.p(), Z.p(), bf, w.p(), bf, out.p(), bf, groups, c, 1e-6f, nullptr); });
  }
  {  // Projections: a prefill-sized product and a decode-sized (weight-streaming) one
    const int n = 4096, in = 5120, out = 5120;
    Buf x = Make(int64_t(n) * in, bf, 50), xf = Make(int64_t(n) * in, f32, 51), w = Make(int64_t(out) * in, bf, 52, 0.02f),
        y = Make(int64_t(n) * out, f32, 53);
    const double bytes = double(n) * in * B2 + double(out) * in * B2 + double(n) * out * B4, flop = 2.0 * n * in * out;
    Report("matmul", S({n, in, out}), "x bf16, w bf16, y f32", bytes, flop,
           [&] { return cu::Matmul(blas, x.p(), bf, w.p(), bf, y.p(), f32, n, in, out, 0.0f, nullptr); });
    Report("matmul", S({n, in, out}), "x f32 (rounded), w bf16, y f32", bytes + double(n) * in * B2, flop,
           [&] { return cu::Matmul(blas, xf.p(), f32, w.p(), bf, y.p(), f32, n, in, out, 0.0f, nullptr); });
    const int nd = 8;
    Report("matmul", S({nd, in, out}), "x bf16, w bf16, y f32 (decode)", double(out) * in * B2, 2.0 * nd * in * out,
           [&] { return cu::Matmul(blas, x.p(), bf, w.p(), bf, y.p(), f32, nd, in, out, 0.0f, nullptr); });
  }
  {  // Grouped output projection: 8 groups of (8 heads x 512) -> 1024
    const int n = 4096, G = 8, in = 4096, out = 1024;
    Buf x = Make(int64_t(n) * G * in, bf, 60), w = Make(int64_t(G) * out * in, bf, 61, 0.02f), y = Make(int64_t(n) * G * out, bf, 62);
    Report("grouped_matmul", S({n, G, in, out}), "bf16", (double(n) * G * in + double(G) * out * in + double(n) * G * out) * B2,
           2.0 * n * G * in * out, [&] { return cu::GroupedMatmul(blas, x.p(), bf, w.p(), bf, y.p(), bf, n, G, in, out, 0.0f, nullptr); });
  }
  {  // Indexer: 64 query rows against 131072 keys (a 256K-token prompt at m = 2)
    const int rows = 64, H = 32, hd = 128, keys = 131072;
    Buf q = Make(int64_t(rows) * H * hd, bf, 70), k = Make(int64_t(keys) * hd, bf, 71), w = Make(int64_t(rows) * H, f32, 72, 0.01f),
        s = Make(int64_t(rows) * keys, f32, 73);
    cu::IndexScoresArgs a;
    a.q = q.p(), a.keys = k.p(), a.type = bf, a.w = w.f(), a.scores = s.f();
    a.n_rows = rows, a.n_heads = H, a.head_dim = hd, a.n_keys = keys;
    Report("index_scores", S({rows, H, hd, keys}), "bf16 q/keys, f32 scores", double(keys) * hd * B2 + double(rows) * keys * B4,
           2.0 * rows * H * hd * keys, [&] { return cu::IndexScores(blas, a, nullptr); });
    // Top-512 of each row, then the candidate blocks (bs 8, keep 2048) of the same scores.
    Buf out = MakeInt(int64_t(rows) * 2048, 1, 0), counts = MakeInt(rows, 1, 0);
    Report("topk", S({rows, keys}) + " k=512", "f32", double(rows) * keys * B4, 0,
           [&] { return cu::TopK(s.f(), keys, nullptr, rows, keys, 512, out.i(), 2048, counts.i(), nullptr); });
    Buf lens = Ints(std::vector<int32_t>(rows, keys));  // every row sees all keys
    cu::DeviceBuffer ws;
    if (!ws.Allocate(cu::CandidateBlocksWorkspaceBytes(rows, keys, 8)).ok()) return 1;
    Report("candidate_blocks", S({rows, keys}) + " bs=8 keep=2048", "f32", double(rows) * keys * B4, 0, [&] {
      return cu::CandidateBlocks(s.f(), keys, lens.i(), rows, keys, 8, 2048, ws.get(), out.i(), 2048, counts.i(), nullptr);
    });
  }
  {  // Top-k of one long row (decode at a 1M-entry pool)
    const int n = 1 << 20;
    Buf s = Make(n, f32, 80), out = MakeInt(512, 1, 0), counts = MakeInt(1, 1, 0);
    Report("topk", S({1, n}) + " k=512", "f32", double(n) * B4, 0,
           [&] { return cu::TopK(s.f(), n, nullptr, 1, n, 512, out.i(), 512, counts.i(), nullptr); });
  }
  {  // Sink attention: 256 query rows, 64 heads of 512, 128 window + 512 selected BF16 entries
    const int rows = 256, H = 64, c = 512, nw = 128, ns = 512, pool_n = 65536;
    Buf q = Make(int64_t(rows) * H * c, f32, 90, 0.05f), o = Make(int64_t(rows) * H * c, f32, 91);
    Buf win = Make(int64_t(rows + nw) * c, bf, 92), pool = Make(int64_t(pool_n) * c, bf, 93), sink = Make(H, f32, 94);
    // Row r's window: entries r .. r+127 (consecutive rows share most of theirs, as in prefill).
    Buf first = MakeInt(rows, 1 << 30, 1), n_win = Ints(std::vector<int32_t>(rows, nw)), n_sel = Ints(std::vector<int32_t>(rows, ns));
    Buf sel = MakeInt(int64_t(rows) * ns, pool_n, 97);
    cu::SinkAttentionArgs a;
    a.q = q.f(), a.out = o.f(), a.n_rows = rows, a.n_heads = H, a.dim = c, a.entry_type = bf;
    a.win = win.p(), a.win_first = first.i(), a.n_win = n_win.i(), a.pool = pool.p(), a.sel = sel.i(), a.ld_sel = ns;
    a.n_sel = n_sel.i(), a.sink = sink.f(), a.scale = 1.0f / 22.627417f;
    const double bytes = 2.0 * rows * H * c * B4 + double(rows) * (nw + ns) * c * B2;
    Report("sink_attention", S({rows, H, c}) + " entries=128+512", "f32 q/out, bf16 entries", bytes, 4.0 * rows * H * (nw + ns) * c,
           [&] { return cu::SinkAttention(a, nullptr); });
  }
  {  // MoE: route 4096 rows over 384 experts (top 6), group, gather, scatter-add at dim 5120
    const int n = 4096, ne = 384, k = 6, d = 5120;
    Buf logits = Make(int64_t(n) * ne, f32, 100, 3.0f), bias = Make(ne, f32, 101, 0.1f);
    Buf experts = MakeInt(int64_t(n) * k, 1, 0), weights = Make(int64_t(n) * k, f32, 102);
    Report("moe_route", S({n, ne}) + " k=6", "f32", double(n) * ne * B4 + double(n) * k * 8, 0,
           [&] { return cu::MoeRoute(logits.f(), bias.f(), n, ne, k, 1.5f, experts.i(), weights.f(), nullptr); });
    Buf counts = MakeInt(ne, 1, 0), offsets = MakeInt(ne + 1, 1, 0), rows = MakeInt(int64_t(n) * k, 1, 0), pos = MakeInt(int64_t(n) * k, 1, 0);
    Report("moe_group", S({n, ne}) + " k=6", "i32", double(n) * k * 4 * 3, 0,
           [&] { return cu::MoeGroup(experts.i(), n, ne, k, counts.i(), offsets.i(), rows.i(), pos.i(), nullptr); });
    Buf x = Make(int64_t(n) * d, bf, 103), xg = Make(int64_t(n) * k * d, bf, 104), h = Make(int64_t(n) * d, f32, 105);
    Report("moe_gather", S({n * k, d}), "bf16", double(n) * k * d * B2 * 2, 0,
           [&] { return cu::MoeGather(x.p(), bf, rows.i(), n * k, d, xg.p(), nullptr); });
    Report("moe_scatter_add", S({n, k, d}), "bf16 y, f32 h", double(n) * k * d * B2 + 2.0 * n * d * B4, 0,
           [&] { return cu::MoeScatterAdd(xg.p(), bf, pos.i(), weights.f(), n, k, d, h.f(), nullptr); });
  }
  return 0;
}
