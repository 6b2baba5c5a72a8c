#include "kernels/work_counters.h"

#include <atomic>

namespace cedar::kernels {

namespace {
std::atomic<bool> g_on{false};
// Sums in fixed point (1 unit = 1 FLOP, 1 byte or 1 ns) so that atomic adds need no CAS loop.
std::atomic<uint64_t> g_matmul_flops{0}, g_matmul_ns{0}, g_matmul_bytes{0}, g_attention_flops{0}, g_index_flops{0}, g_attention_ns{0};
}  // namespace

void EnableWorkCounters(bool on) { g_on.store(on, std::memory_order_relaxed); }

void ResetWorkCounters() {
  for (auto* c : {&g_matmul_flops, &g_matmul_ns, &g_matmul_bytes, &g_attention_flops, &g_index_flops, &g_attention_ns}) c->store(0);
}

WorkCounters ReadWorkCounters() {
  WorkCounters w;
  w.matmul_flops = double(g_matmul_flops.load());
  w.matmul_seconds = double(g_matmul_ns.load()) * 1e-9;
  w.matmul_weight_bytes = double(g_matmul_bytes.load());
  w.attention_flops = double(g_attention_flops.load());
  w.index_flops = double(g_index_flops.load());
  w.attention_seconds = double(g_attention_ns.load()) * 1e-9;
  return w;
}

namespace internal {
bool WorkCountersOn() { return g_on.load(std::memory_order_relaxed); }
void CountMatmul(double flops, double seconds, double weight_bytes) {
  g_matmul_flops.fetch_add(uint64_t(flops), std::memory_order_relaxed);
  g_matmul_bytes.fetch_add(uint64_t(weight_bytes), std::memory_order_relaxed);
  g_matmul_ns.fetch_add(uint64_t(seconds * 1e9), std::memory_order_relaxed);
}
void CountAttention(double flops) { g_attention_flops.fetch_add(uint64_t(flops), std::memory_order_relaxed); }
void CountIndex(double flops) { g_index_flops.fetch_add(uint64_t(flops), std::memory_order_relaxed); }
void CountAttentionSeconds(double seconds) { g_attention_ns.fetch_add(uint64_t(seconds * 1e9), std::memory_order_relaxed); }
}  // namespace internal

}  // namespace cedar::kernels
