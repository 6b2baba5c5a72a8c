// Which prompt chunks one mixed step runs (issue 14): a pure function of the prefilling turns'
// positions, so the policy is tested apart from the engine.
//
// A turn's prompt is cut every `chunk` rows from where its state starts, whatever the load, so
// its result never depends on the other turns; a plan only decides how many of its chunks run
// in this step. The first chunk of a step always runs (a prompt always advances, even when one
// chunk is larger than the budget); any other runs only if it fits in what is left.
//
// Once a turn's last chunk is planned, its decoder phase (the bounded replay or the exact
// staircase, engine.h PrefillFinish) is its next item, with its own cost in rows: it runs in the
// same step only if it fits too, else first thing in a later step. A phase that can pause
// between layers (engine/batch_prefill.h PrefillFinishLayers) is one item per layer instead:
// a step takes as many of its layers as fit, so no step holds a whole replay. A step may also have a budget
// in predicted time (--step-ms): then a chunk late in a long prompt, which attends to a longer
// prefix, counts for more than one early in it. Otherwise the step that ends
// a long prompt would hold a whole chunk plus the decoder phase, and every decoding session
// would see that one long gap (it set the p99 of issue 14's benchmark).
//
// fcfs (the default): turns in priority order, each taking all the chunks that fit before the
//   next turn gets any (a long prompt that arrived first holds the whole budget until it is
//   done; what the turns behind it wait for is its whole prefill).
// round-robin: among turns of equal priority, one chunk each per round, rounds
//   until the budget is spent; lower priority values are planned first, as in fcfs. The turn
//   that opens the rounds rotates from step to step (`round_start`): were it always the oldest,
//   a step whose budget its first item fills (a slow step under --step-ms, or a decoder phase
//   priced above what is left) would never reach the others until it was done. With a
//   chunk smaller than the step (e.g. 512-row steps of 256-row chunks) a short prompt (an
//   agent's tool result) shares the step with a long prompt's chunk instead of waiting for all
//   of it (vLLM's partial prefills; SGLang's chunked prefill is fcfs).
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace cedar::session {

enum class PrefillOrder {
  kFcfs,        // --prefill-order fcfs
  kRoundRobin,  // --prefill-order round-robin
};
const char* PrefillOrderName(PrefillOrder o);  // "fcfs" or "round-robin"
bool ParsePrefillOrder(const std::string& s, PrefillOrder* out);

// One prefilling turn as the planner sees it.
struct ChunkDemand {
  int64_t next = 0;         // the first prompt row not yet encoded
  int64_t end = 0;          // the prompt's length (rows [next, end) are left)
  int priority = 0;         // lower first; demands arrive sorted by (priority, arrival)
  int64_t finish_rows = 0;  // what its decoder phase (what is left of it) costs, in step rows (an estimate)
  double ms_per_row = 0;    // predicted ms per prompt row of its chunks (0 = unknown: only rows bind)
  double finish_ms = 0;     // its decoder phase's predicted ms (0 = unknown)
  // The decoder layers its phase has left, in order, each one's rows (they sum to finish_rows):
  // the phase then runs in parts, as many layers a step as fit (a 16K prompt's bounded replay is
  // about two steps' work). Empty: the phase is one item (a backend or turn that runs it whole).
  std::vector<int64_t> finish_layer_rows = {};
};

// What one turn runs in this step.
struct StepShare {
  std::vector<int64_t> chunks;  // lengths of the chunks, in prompt order
  bool finish = false;          // its decoder phase ends in this step (after its last chunk)
  int finish_layers = 0;        // of its phase in parts (finish_layer_rows): the layers this step runs
  bool operator==(const StepShare&) const = default;
};

// Per demand (same order), its share of the step. `budget`: prefill rows the step may hold (the
// step's budget less its decode rows; may be <= 0, then only the first item runs); `chunk` >= 1.
// `budget_ms`: the predicted ms the step's prefill items may take (--step-ms less the decode
// rows' prediction, step_cost.h); an item after the first runs only if it fits both budgets.
// `round_start`: round-robin only; each group of equal priority starts its rounds at its
// (round_start mod group size)-th turn (the caller counts its steps).
std::vector<StepShare> PlanChunks(std::span<const ChunkDemand> demands, int64_t budget, int64_t chunk,
                                  PrefillOrder order,
                                  double budget_ms = std::numeric_limits<double>::infinity(),
                                  uint64_t round_start = 0);

}  // namespace cedar::session
