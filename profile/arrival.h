// Arrival models of `cedar profile`: when each conversation of a trace starts. A conversation is
// one trace file (a Claude Code session with its sub-agents, or a whole Mooncake file, which
// already carries its own arrival process); it keeps its recorded internal timing, and an
// arrival model only chooses its start. Which model fits which deployment: docs/PROFILE.md.
//
//   recorded        every file starts at 0 (timestamps as recorded, each file offset by its own
//                   first timestamp): all conversations at once, as the files were merged before
//   poisson:R       conversations start as a Poisson process of R per minute, in file order
//                   (the first at 0, then exponential gaps of mean 60/R s from a seeded generator)
//   concurrency:N   at most N conversations active; the first N start at 0 and the next starts
//                   when an active one ends (a conversation is active from its first request to
//                   its last, sub-agents included)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profile/trace.h"

namespace cedar::profile {

enum class ArrivalKind { kRecorded, kPoisson, kConcurrency };

struct ArrivalModel {
  ArrivalKind kind = ArrivalKind::kRecorded;
  double per_minute = 0;  // poisson: new conversations per minute (> 0)
  int concurrency = 0;    // concurrency: conversations active at most (>= 1)
  uint64_t seed = 0;      // poisson: the gaps' generator
};

// "recorded", "poisson:R", "concurrency:N". Throws std::invalid_argument naming the value and
// what is expected.
ArrivalModel ParseArrival(const std::string& s, uint64_t seed);
std::string ArrivalName(const ArrivalModel& m);  // "recorded", "poisson:2", "concurrency:8"

// One conversation as the arrival model sees it.
struct ConversationSpan {
  uint32_t conversation = 0;  // TraceRequest::conversation
  double start = 0;           // seconds, as placed
  double duration = 0;        // its last request's recorded time (its first is at 0)
  size_t requests = 0;
  bool has_subagents = false;
};

// The i-th gap of a Poisson process of `per_minute` arrivals seeded by `seed`: mt19937_64 draws
// u = (x >> 11)·2^-53 and the gap is -ln(1 - u)·60 / per_minute seconds (spelled out so a test
// can recompute it).
std::vector<double> PoissonStarts(size_t n, double per_minute, uint64_t seed);

// Places every conversation of `trace` (t = start + recorded_t) and sorts the requests by the new
// arrival time (load order among equal times). Returns the conversations in load order.
std::vector<ConversationSpan> ApplyArrival(const ArrivalModel& m, Trace* trace);

// Active conversations over time: (t, k) at every change, k conversations active on [t, next t);
// a conversation counts on [start, start + duration), so one that starts when another ends does
// not overlap it, and a one-request conversation (duration 0) is never counted.
std::vector<std::pair<double, int>> ActiveOverTime(const std::vector<ConversationSpan>& spans);

}  // namespace cedar::profile
