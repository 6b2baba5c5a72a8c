// A CPU emulation of the small part of CUDA and cuBLAS that kernels/cuda uses, for checking the
// kernels' logic (and the gpu tests themselves) on a machine without a GPU. Each CUDA thread is
// a fiber (ucontext); the blocks of a grid run one after another and the threads of a block
// round-robin, switching only at __syncthreads, __syncwarp and warp shuffles, so the barriers
// and shuffles are exact and a barrier not reached by every live thread aborts ("divergent
// barrier"). Not modelled: memory-model races between threads of one block (the fibers never
// interleave between barriers), warp-synchronous code without __syncwarp, performance.
// cuBLAS products are naive column-major loops that check their arguments like cuBLAS.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }

// ---- BF16 ----
struct __nv_bfloat16 {
  uint16_t bits = 0;
};
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t b = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  __nv_bfloat16 h;
  if ((b & 0x7fffffffu) > 0x7f800000u) h.bits = uint16_t((b >> 16) | 0x40u);
  else h.bits = uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  return h;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// ---- threads as fibers ----
namespace emu {

enum State { kRun, kAtBlock, kAtWarp, kDone };
struct Fiber {
  ucontext_t ctx;
  State state = kRun;
  dim3 tid;
  int warp = 0, lane = 0;
};
struct Block {
  std::vector<Fiber> fibers;
  ucontext_t main;
  int cur = 0;
  dim3 bid, bdim, gdim;
  std::vector<uint64_t> slots;  // shuffle exchange: [warp * 32 + lane]
  std::vector<char> dyn_shared;
  std::function<void()> body;
};
inline Block* g_block = nullptr;
inline std::vector<std::vector<char>> g_stacks;
inline int g_last_error = 0;

inline void Yield(State s) {
  Fiber& f = g_block->fibers[size_t(g_block->cur)];
  f.state = s;
  swapcontext(&f.ctx, &g_block->main);
}
inline void Entry() {
  g_block->body();
  g_block->fibers[size_t(g_block->cur)].state = kDone;  // uc_link returns to the scheduler
}

// Runs one block to completion; aborts on a barrier that cannot complete.
inline void RunBlock(Block& b) {
  const size_t n = size_t(b.bdim.x) * b.bdim.y * b.bdim.z;
  b.fibers.assign(n, Fiber{});
  b.slots.assign(((n + 31) / 32) * 32, 0);
  if (g_stacks.size() < n) g_stacks.resize(n);
  g_block = &b;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.tid = dim3(unsigned(i % b.bdim.x), unsigned((i / b.bdim.x) % b.bdim.y), unsigned(i / (size_t(b.bdim.x) * b.bdim.y)));
    f.warp = int(i / 32), f.lane = int(i % 32);
    if (g_stacks[i].empty()) g_stacks[i].resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g_stacks[i].data();
    f.ctx.uc_stack.ss_size = g_stacks[i].size();
    f.ctx.uc_link = &b.main;
    makecontext(&f.ctx, Entry, 0);
  }
  const size_t n_warps = (n + 31) / 32;
  for (;;) {
    bool ran = false;
    for (size_t i = 0; i < n; ++i)
      if (b.fibers[i].state == kRun) {
        b.cur = int(i);
        swapcontext(&b.main, &b.fibers[i].ctx);
        ran = true;
      }
    size_t alive = 0, at_block = 0;
    for (auto& f : b.fibers) alive += f.state != kDone, at_block += f.state == kAtBlock;
    if (alive == 0) break;
    bool released = false;
    if (at_block == alive) {
      for (auto& f : b.fibers)
        if (f.state == kAtBlock) f.state = kRun;
      released = true;
    } else {
      for (size_t w = 0; w < n_warps; ++w) {
        size_t wa = 0, ww = 0;
        for (size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i)
          wa += b.fibers[i].state != kDone, ww += b.fibers[i].state == kAtWarp;
        if (wa > 0 && ww == wa) {
          for (size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i) b.fibers[i].state = kRun;
          released = true;
        }
      }
    }
    if (!ran && !released) {
      std::fprintf(stderr, "emu: divergent barrier in block (%u,%u): %zu live threads, %zu at __syncthreads\n", b.bid.x,
                   b.bid.y, alive, at_block);
      std::abort();
    }
  }
  g_block = nullptr;
}

template <typename... KArgs, typename... Args>
void Launch(dim3 grid, dim3 block, size_t shm, void* stream, void (*kernel)(KArgs...), Args... args) {
  (void)stream;
  const size_t threads = size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || shm > 48 * 1024 || grid.y > 65535 || grid.z > 65535 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0) {
    g_last_error = 9;  // cudaErrorInvalidConfiguration
    return;
  }
  Block b;
  b.bdim = block, b.gdim = grid;
  b.dyn_shared.assign(std::max<size_t>(shm, 1), char(0x7f));  // exact: ASan sees overruns
  b.body = [&] { kernel(KArgs(args)...); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.bid = dim3(x, y, z);
        RunBlock(b);
      }
}

template <typename T>
T Shfl(T v, int src_lane_fn_kind, int arg) {
  Block& b = *g_block;
  Fiber& f = b.fibers[size_t(b.cur)];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  b.slots[size_t(f.warp) * 32 + size_t(f.lane)] = bits;
  Yield(kAtWarp);
  int src = f.lane;
  if (src_lane_fn_kind == 0) src = f.lane ^ arg;            // xor
  else if (f.lane >= arg) src = f.lane - arg;               // up
  Fiber& g = g_block->fibers[size_t(g_block->cur)];
  T r;
  const uint64_t got = g_block->slots[size_t(g.warp) * 32 + size_t(src)];
  std::memcpy(&r, &got, sizeof(T));
  Yield(kAtWarp);
  return r;
}

}  // namespace emu

#define threadIdx (::emu::g_block->fibers[size_t(::emu::g_block->cur)].tid)
#define blockIdx (::emu::g_block->bid)
#define blockDim (::emu::g_block->bdim)
#define gridDim (::emu::g_block->gdim)
#define EMU_DYN_SHARED(T) reinterpret_cast<T*>(::emu::g_block->dyn_shared.data())

inline void __syncthreads() { emu::Yield(emu::kAtBlock); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::Yield(emu::kAtWarp); }
template <typename T>
T __shfl_xor_sync(unsigned, T v, int o) { return emu::Shfl(v, 0, o); }
template <typename T>
T __shfl_up_sync(unsigned, T v, int o) { return emu::Shfl(v, 1, o); }
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}

// ---- runtime ----
typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
typedef void* cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount, l2CacheSize;
  size_t totalGlobalMem;
};
inline const char* cudaGetErrorString(cudaError_t e) { return e == 0 ? "no error" : e == 9 ? "invalid configuration (emu)" : "error (emu)"; }
inline cudaError_t cudaGetLastError() {
  const int e = emu::g_last_error;
  emu::g_last_error = 0;
  return e;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return 0;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::snprintf(p->name, sizeof(p->name), "CPU emulator");
  p->major = 9, p->minor = 0, p->multiProcessorCount = 1, p->l2CacheSize = 0, p->totalGlobalMem = size_t(1) << 34;
  return 0;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  std::memset(*p, 0xa5, n);  // garbage, like fresh device memory
  return *p ? 0 : 2;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return 0;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return 0;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(d, s, n, k); }
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return 0;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
// Events: host timestamps (everything runs synchronously here).
typedef struct EmuEvent* cudaEvent_t;
struct EmuEvent {
  std::chrono::steady_clock::time_point t;
};
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmuEvent;
  return 0;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return 0;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  e->t = std::chrono::steady_clock::now();
  return 0;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return 0;
}

// ---- cuBLAS ----
typedef struct EmuBlas* cublasHandle_t;
struct EmuBlas {};
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
inline const char* cublasGetStatusString(cublasStatus_t s) { return s == 0 ? "success" : s == 7 ? "invalid value (emu)" : "not supported (emu)"; }
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new EmuBlas;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }

namespace emu {
inline float Get(const void* p, cudaDataType_t t, size_t i) {
  return t == CUDA_R_32F ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
inline void Put(void* p, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_32F) static_cast<float*>(p)[i] = v;
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}
}  // namespace emu

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                                                 int lda, long long sa, const void* B, cudaDataType_t bt, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  if (!h || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (at != bt || (at == CUDA_R_32F && ct != CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (int g = 0; g < batch; ++g)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int l = 0; l < k; ++l) {
          const size_t ai = ta == CUBLAS_OP_N ? size_t(i) + size_t(l) * lda : size_t(l) + size_t(i) * lda;
          const size_t bi = tb == CUBLAS_OP_N ? size_t(l) + size_t(j) * ldb : size_t(j) + size_t(l) * ldb;
          s += double(emu::Get(A, at, size_t(g * sa) + ai)) * emu::Get(B, bt, size_t(g * sb) + bi);
        }
        const size_t ci = size_t(g * sc) + size_t(i) + size_t(j) * ldc;
        const float old = be != 0.0f ? emu::Get(C, ct, ci) : 0.0f;
        emu::Put(C, ct, ci, float(al * s + be * old));
      }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                                   cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t ctype, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                    ctype, algo);
}
