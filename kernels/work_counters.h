// Opt-in counters of the work the CPU kernels did, for benchmarks: they turn "tokens per
// second" into "what fraction of the machine's sgemm rate". Off by default (one relaxed load
// per kernel call); not for tests, which assert results, not speed.
#pragma once
#include <cstdint>

namespace cedar::kernels {

struct WorkCounters {
  double matmul_flops = 0;     // 2 * n * in * out summed over Matmul calls
  double matmul_seconds = 0;   // wall time inside Matmul calls made outside pool jobs
  double matmul_weight_bytes = 0;  // bytes of the weights Matmul calls read: each job's once, whatever its rows (scales included)
  double attention_flops = 0;  // SinkAttention: 4 * heads * dim per (row, entry): scores + sum
  double index_flops = 0;      // IndexScores: 2 * heads * head_dim per (row, key)
  double attention_seconds = 0;  // wall time inside the engine's AttendRows calls (all rows of a layer)
};

void EnableWorkCounters(bool on);
void ResetWorkCounters();
WorkCounters ReadWorkCounters();

namespace internal {
bool WorkCountersOn();
void CountMatmul(double flops, double seconds, double weight_bytes);
void CountAttention(double flops);
void CountIndex(double flops);
void CountAttentionSeconds(double seconds);
}  // namespace internal

}  // namespace cedar::kernels
