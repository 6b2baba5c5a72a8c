#include "profile/arrival.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <random>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/flag_values.h"

namespace cedar::profile {

ArrivalModel ParseArrival(const std::string& s, uint64_t seed) {
  ArrivalModel m;
  m.seed = seed;
  const std::string expected = "expected recorded, poisson:R (conversations per minute) or concurrency:N";
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (kind == "recorded" && colon == std::string::npos) return m;
  try {
    if (kind == "poisson" && !arg.empty()) {
      m.kind = ArrivalKind::kPoisson;
      m.per_minute = ParseRealFlag<double>("R", arg, 0.0, 1e9, true);
      return m;
    }
    if (kind == "concurrency" && !arg.empty()) {
      m.kind = ArrivalKind::kConcurrency;
      m.concurrency = ParseIntFlag<int>("N", arg, 1, 1 << 24);
      return m;
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--arrival '" + s + "': " + e.what());
  }
  throw std::invalid_argument("--arrival: " + expected + ", found '" + s + "'");
}

std::string ArrivalName(const ArrivalModel& m) {
  switch (m.kind) {
    case ArrivalKind::kRecorded: return "recorded";
    case ArrivalKind::kPoisson: return fmt::format("poisson:{:g}", m.per_minute);
    case ArrivalKind::kConcurrency: return fmt::format("concurrency:{}", m.concurrency);
  }
  return "?";
}

std::vector<double> PoissonStarts(size_t n, double per_minute, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> starts;
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) {
      const double u = double(rng() >> 11) * 0x1.0p-53;
      t += -std::log1p(-u) * 60.0 / per_minute;
    }
    starts.push_back(t);
  }
  return starts;
}

std::vector<ConversationSpan> ApplyArrival(const ArrivalModel& m, Trace* trace) {
  // Conversations in load order (their first request's seq).
  std::map<uint32_t, size_t> index;  // conversation id -> position in spans
  std::vector<std::pair<size_t, uint32_t>> first_seq;
  std::map<uint32_t, ConversationSpan> by_id;
  std::map<uint32_t, size_t> min_seq;
  for (const TraceRequest& r : trace->requests) {
    ConversationSpan& c = by_id[r.conversation];
    c.conversation = r.conversation;
    c.duration = std::max(c.duration, r.recorded_t);
    ++c.requests;
    c.has_subagents |= r.subagent;
    auto [it, fresh] = min_seq.emplace(r.conversation, r.seq);
    if (!fresh) it->second = std::min(it->second, r.seq);
  }
  for (auto& [id, seq] : min_seq) first_seq.push_back({seq, id});
  std::sort(first_seq.begin(), first_seq.end());
  std::vector<ConversationSpan> spans;
  for (auto& [seq, id] : first_seq) {
    index[id] = spans.size();
    spans.push_back(by_id[id]);
  }
  if (m.kind == ArrivalKind::kPoisson) {
    const std::vector<double> starts = PoissonStarts(spans.size(), m.per_minute, m.seed);
    for (size_t i = 0; i < spans.size(); ++i) spans[i].start = starts[i];
  } else if (m.kind == ArrivalKind::kConcurrency) {
    // End times of the active conversations; the next one starts at the earliest.
    std::priority_queue<double, std::vector<double>, std::greater<>> ends;
    for (ConversationSpan& c : spans) {
      if (ends.size() >= size_t(m.concurrency)) {
        c.start = ends.top();
        ends.pop();
      }
      ends.push(c.start + c.duration);
    }
  }
  for (TraceRequest& r : trace->requests) r.t = spans[index[r.conversation]].start + r.recorded_t;
  SortByArrival(trace);
  spdlog::debug("arrival {}: {} conversations placed, the last starting at {:.1f} s", ArrivalName(m), spans.size(),
                spans.empty() ? 0.0 : spans.back().start);
  return spans;
}

std::vector<std::pair<double, int>> ActiveOverTime(const std::vector<ConversationSpan>& spans) {
  std::vector<std::pair<double, int>> events;  // +1 at a start, -1 at an end
  for (const ConversationSpan& c : spans) {
    if (c.duration <= 0) continue;  // an instant: never active over an interval
    events.push_back({c.start, +1});
    events.push_back({c.start + c.duration, -1});
  }
  std::sort(events.begin(), events.end());
  std::vector<std::pair<double, int>> out;
  int active = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    active += events[i].second;
    if (i + 1 == events.size() || events[i + 1].first != events[i].first) out.push_back({events[i].first, active});
  }
  return out;
}

}  // namespace cedar::profile
