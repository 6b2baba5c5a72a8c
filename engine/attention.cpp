#include "engine/attention.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "kernels/work_counters.h"

namespace cedar {

namespace k = kernels;

void AttendRows(const ModelConfig& c, const std::vector<AttentionRow>& rows, const float* q, const float* sink,
                float scale, float* o) {
  const int n = int(rows.size()), H = c.n_heads, cd = c.head_dim;
  if (n == 0) return;
  // The benchmark's attention_seconds (kernels/work_counters.h), when the counters are on.
  const bool timed = k::internal::WorkCountersOn() && !k::InPoolJob();
  const auto t0 = std::chrono::steady_clock::now();
  // Tasks are (row, part of the heads); parts > 1 only when rows alone cannot fill the pool.
  // Parts hold whole tiles of 4 heads (SinkAttention scores heads 4 at a time and the rest one
  // by one, in a different summation order), so a row's result does not depend on how many
  // rows share the call: a decoding turn gets the same bits alone or in a mixed step.
  constexpr int kHeadTile = 4;
  const int tiles = H % kHeadTile == 0 ? H / kHeadTile : 1;
  const int parts = std::max(1, std::min(tiles, (k::Threads() + n - 1) / n));
  const int64_t tasks = int64_t(n) * parts;
  // Rows late in a prompt see more entries than early ones, so equal contiguous shares would
  // leave a core idle: each thread takes the next chunk of tasks (32 per thread: a 512-row prefill
  // in chunks of 8 rows, so the last chunk leaves the other core waiting ~1/64 of the pass, not 1/16).
  const int64_t chunk = std::max<int64_t>(1, tasks / (32 * int64_t(k::Threads())));
  std::atomic<int64_t> next{0};
  k::ParallelFor(std::min<int64_t>(k::Threads(), tasks), 1, [&](int64_t, int64_t) {
    for (int64_t b; (b = next.fetch_add(chunk, std::memory_order_relaxed)) < tasks;)
      for (int64_t task = b; task < std::min(tasks, b + chunk); ++task) {
        const int r = int(task / parts), part = int(task % parts);
        const int h0 = tiles * part / parts * (H / tiles), h1 = tiles * (part + 1) / parts * (H / tiles);
        const AttentionRow& a = rows[size_t(r)];
        const size_t off = (size_t(r) * H + h0) * cd;
        k::SinkAttention(q + off, h1 - h0, cd, a.win, a.n_win, a.pool, a.sel, a.n_sel, sink + h0, scale, o + off);
      }
  });
  if (timed) k::internal::CountAttentionSeconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace cedar
