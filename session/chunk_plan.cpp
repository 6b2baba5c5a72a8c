#include "session/chunk_plan.h"

#include <algorithm>

namespace cedar::session {

const char* PrefillOrderName(PrefillOrder o) { return o == PrefillOrder::kFcfs ? "fcfs" : "round-robin"; }

bool ParsePrefillOrder(const std::string& s, PrefillOrder* out) {
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kRoundRobin})
    if (s == PrefillOrderName(o)) {
      *out = o;
      return true;
    }
  return false;
}

std::vector<StepShare> PlanChunks(std::span<const ChunkDemand> demands, int64_t budget, int64_t chunk,
                                  PrefillOrder order, double budget_ms, uint64_t round_start) {
  const size_t n = demands.size();
  std::vector<StepShare> plan(n);
  std::vector<int64_t> at(n);
  for (size_t i = 0; i < n; ++i) at[i] = demands[i].next;
  int64_t rows = 0;
  const auto spent = [&] { return rows > 0 && (budget <= 0 || budget_ms <= 0); };
  // Demand i's next item (a chunk, or its decoder phase after the last one), if it has one and
  // it may run now.
  const auto take = [&](size_t i) {
    const ChunkDemand& d = demands[i];
    if (plan[i].finish) return false;
    const bool chunks_left = at[i] < d.end;
    const bool in_parts = !d.finish_layer_rows.empty();
    int64_t len = d.finish_rows;
    double ms = d.finish_ms;
    if (chunks_left) {
      len = std::min(chunk, d.end - at[i]);
      ms = double(len) * d.ms_per_row;
    } else if (in_parts) {  // its next layer, with its share of the phase's predicted ms
      len = d.finish_layer_rows[size_t(plan[i].finish_layers)];
      ms = d.finish_rows > 0 ? d.finish_ms * double(len) / double(d.finish_rows) : 0;
    }
    if (rows > 0 && (len > budget || ms > budget_ms)) return false;
    if (chunks_left) {
      plan[i].chunks.push_back(len);
      at[i] += len;
    } else if (in_parts) {
      plan[i].finish = ++plan[i].finish_layers == int(d.finish_layer_rows.size());
    } else {
      plan[i].finish = true;
    }
    budget -= len;
    budget_ms -= ms;
    rows += std::max<int64_t>(len, 1);  // a planned item makes the step non-empty
    return true;
  };
  if (order == PrefillOrder::kFcfs) {
    for (size_t i = 0; i < n && !spent(); ++i)
      while (take(i)) {
      }
    return plan;
  }
  for (size_t g = 0; g < n && !spent();) {
    size_t h = g;
    while (h < n && demands[h].priority == demands[g].priority) ++h;
    const size_t size = h - g, first = size_t(round_start % size);
    for (bool any = true; any && !spent();) {
      any = false;
      for (size_t k = 0; k < size && !spent(); ++k) any = take(g + (first + k) % size) || any;
    }
    g = h;
  }
  return plan;
}

}  // namespace cedar::session
