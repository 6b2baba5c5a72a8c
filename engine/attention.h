// The sparse sink attention of one layer over a batch of query rows (spec §3.4): each row sees
// its window [lo, t] and its selected pool entries. Internal to engine/.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"

namespace cedar {

// One query row's sources.
struct AttentionRow {
  const float* win = nullptr;    // [n_win, c]: window entries of positions [lo, t], contiguous
  int n_win = 0;
  const float* pool = nullptr;   // [n_pool_entries, c] (nullptr for a layer without a pool)
  const int32_t* sel = nullptr;  // [n_sel] ascending pool entry indices
  int n_sel = 0;
};

// o[r] = SinkAttention(q[r]) for every row; q, o: [n, H, c]. Rows are spread over the thread
// pool by their cost (entries seen); with fewer rows than threads (decode), each row's heads
// are split instead so that no core waits.
void AttendRows(const ModelConfig& c, const std::vector<AttentionRow>& rows, const float* q, const float* sink,
                float scale, float* o);

}  // namespace cedar
