// The scheduler flags bench_scheduler and bench_trace_replay share (issue 14): each overrides
// one field of session::SchedulerOptions, unset = that field's default.
#pragma once
#include <string>

#include "bench/bench_flags.h"
#include "session/session_manager.h"

namespace cedar::bench {

struct SchedulerFlags {
  int step_tokens = 0;        // --step-tokens (0 = SchedulerOptions' default)
  int chunk = 0;              // --max-prefill-chunk (0 = its default)
  std::string prefill_order;  // --prefill-order ("" = its default)
  double step_ms = -1;        // --step-ms (-1 = its default; 0 = rows only)

  void Add(po::options_description& desc) {
    desc.add_options()("step-tokens", cedar::cli::IntOption("--step-tokens", &step_tokens, 0, 1 << 20),
                       "SchedulerOptions::step_tokens (0 = its default)")(
        "max-prefill-chunk", cedar::cli::IntOption("--max-prefill-chunk", &chunk, 0, 1 << 20),
        "SchedulerOptions::max_prefill_chunk (0 = its default)")(
        "prefill-order", po::value(&prefill_order),
        "SchedulerOptions::prefill_order: fcfs | round-robin (default: its default)")(
        "step-ms", cedar::cli::RealOption("--step-ms", &step_ms, -1.0, 1e7),
        "SchedulerOptions::step_ms: a step's predicted ms at most (0 = rows only, -1 = its default)");
  }
  // After parsing: -1 when the values are usable, else the exit status (2, one line on stderr).
  int Check(const char* program) const {
    session::PrefillOrder o;
    if (!prefill_order.empty() && !session::ParsePrefillOrder(prefill_order, &o))
      return FlagError(program, "--prefill-order: expected fcfs or round-robin, found '" + prefill_order + "'");
    return -1;
  }
  void Apply(session::SchedulerOptions* s) const {
    if (step_tokens > 0) s->step_tokens = step_tokens;
    if (chunk > 0) s->max_prefill_chunk = chunk;
    if (step_ms >= 0) s->step_ms = step_ms;
    if (!prefill_order.empty()) session::ParsePrefillOrder(prefill_order, &s->prefill_order);
  }
};

}  // namespace cedar::bench
