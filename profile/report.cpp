// report.json and the terminal summary. Plots and index.html are in report_files.cpp.
#include "profile/report.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "engine/info.h"
#include "profile/report_live.h"

namespace cedar::profile {

using nlohmann::json;

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = size_t(std::ceil(q * double(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::string FormatBudget(uint64_t bytes) {
  const double mib = double(bytes) / double(1ull << 20);
  if (bytes < (1ull << 20)) return fmt::format("{:.4g} KiB", double(bytes) / 1024.0);
  if (bytes < (1ull << 30)) return fmt::format("{:.4g} MiB", mib);
  return fmt::format("{:.4g} GiB", mib / 1024.0);
}

namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

json CountersJson(const cache::CacheCounters& c) {
  return {{"snapshots_dropped", c.snapshots_dropped},
          {"snapshots_spilled_to_disk", c.snapshots_spilled},
          {"pages_spilled_to_disk", c.pages_spilled},
          {"pages_dropped", c.pages_dropped},
          {"disk_entries_deleted", c.disk_entries_deleted},
          {"disk_snapshots_deleted", c.disk_snapshots_deleted},
          {"disk_write_failures", c.disk_write_failures}};
}

json TotalsJson(const Totals& t, const Totals& decoder_only_no_cache, const Totals& ced_no_cache) {
  return {{"requests", t.requests},
          {"prompt_tokens", t.prompt_tokens},
          {"matched_tokens", t.matched_tokens},
          {"hit_tokens", {{"ram", t.hit_ram}, {"disk", t.hit_disk}, {"total", t.hit_ram + t.hit_disk}}},
          {"hit_rate", t.hit_rate()},
          {"prefill_units",
           {{"total", t.units}, {"encoder", t.encoder_units}, {"decoder", t.decoder_units}, {"replay", t.replay_units}}},
          {"saved_vs_decoder_only_no_cache", 1.0 - Ratio(double(t.units), double(decoder_only_no_cache.units))},
          {"saved_vs_ced_no_cache", 1.0 - Ratio(double(t.units), double(ced_no_cache.units))}};
}

json DesignJson(const DesignRun& run, const Simulation& sim) {
  const Totals& dec0 = sim.runs()[3].totals;
  const Totals& ced0 = sim.runs()[2].totals;
  json j = TotalsJson(run.totals, dec0, ced0);
  j["label"] = DesignLabel(run.design);
  std::vector<double> ttft;
  for (const Outcome& o : run.outcomes) ttft.push_back(o.ttft_s);
  std::sort(ttft.begin(), ttft.end());
  if (sim.config().cost.has_time()) {
    j["ttft_s"] = {{"mean", Ratio(run.totals.ttft_s, double(run.totals.requests))},
                   {"p50", Percentile(ttft, 0.5)},
                   {"p90", Percentile(ttft, 0.9)},
                   {"p99", Percentile(ttft, 0.99)},
                   {"max", ttft.empty() ? 0.0 : ttft.back()}};
  } else {
    j["ttft_s"] = nullptr;
  }
  if (HasCache(run.design)) {
    j["evictions"] = CountersJson(run.counters);
    j["replays"] = {{"encoder_replays_snapshot_evicted", run.totals.replays_snapshot_evicted},
                    {"encoder_replays_no_snapshot_stored", run.totals.replays_no_snapshot_stored},
                    {"encoder_replay_units", run.totals.replay_units}};
    if (run.design == Design::kCedar) {
      j["replays"]["decoder_replay_units"] = run.totals.decoder_units;
      j["exact_repeats"] = run.totals.tail_hits;  // whole prompts served from a decoder tail
    }
    const uint64_t k = std::max<uint64_t>(1, sim.config().payload_scale);
    j["bytes"] = {{"peak_ram", run.totals.peak_ram_bytes},
                  {"peak_disk", run.totals.peak_disk_bytes},
                  {"final_ram", run.final_sizes.ram.used_bytes() * k},
                  {"final_disk", run.final_sizes.disk.used_bytes() * k},
                  {"final_snapshots", run.final_sizes.snapshots}};
  }
  return j;
}

json OutcomeJson(Design d, const Outcome& o, bool time) {
  json j = {{"units", o.units}};
  if (time) j["ttft_s"] = o.ttft_s;
  if (!HasCache(d)) return j;
  j["matched"] = o.matched;
  j["hit_ram"] = o.hit_ram;
  j["hit_disk"] = o.hit_disk;
  j["ram_bytes"] = o.ram_bytes;
  j["disk_bytes"] = o.disk_bytes;
  if (d == Design::kCedar) {
    j["snapshot"] = o.snapshot_position;
    j["replay"] = ReplayKindName(o.replay);
    j["tail_hit"] = o.tail_hit;
  }
  return j;
}

json TraceJson(const Trace& trace) {
  json files = json::array();
  for (size_t i = 0; i < trace.files.size(); ++i) files.push_back({{"path", trace.files[i]}, {"format", trace.formats[i]}});
  json issues = json::array();
  for (const TraceIssue& is : trace.issues) issues.push_back({{"where", is.where}, {"what", is.what}});
  std::set<std::string> sessions;
  int64_t in = 0, out = 0;
  double last = 0;
  for (const TraceRequest& r : trace.requests) {
    sessions.insert(r.session);
    in += r.input_tokens;
    out += r.output_tokens;
    last = std::max(last, r.t);
  }
  return {{"files", files},          {"requests", trace.requests.size()}, {"sessions", sessions.size()},
          {"prompt_tokens", in},     {"output_tokens", out},              {"duration_s", last},
          {"malformed_skipped", trace.issues.size()}, {"issues", issues}};
}

json SweepJson(const Simulation& sim) {
  const Totals& dec0 = sim.runs()[3].totals;
  const Totals& ced0 = sim.runs()[2].totals;
  json points = json::array();
  for (const SweepPoint& p : sim.sweep()) {
    json c = TotalsJson(p.cedar, dec0, ced0);
    c["evictions"] = CountersJson(p.cedar_counters);
    json d = TotalsJson(p.decoder_only, dec0, ced0);
    d["evictions"] = CountersJson(p.decoder_only_counters);
    points.push_back({{"ram_budget", p.ram_budget}, {"cedar", c}, {"decoder-only-lru", d}});
  }
  return points;
}

// Time-weighted mean and peak of the active conversations, and their (t, k) steps.
json ArrivalJson(const ReportInput& in) {
  json j = {{"model", in.arrival}, {"conversations", in.spans ? in.spans->size() : 0}};
  if (!in.spans) return j;
  const auto steps = ActiveOverTime(*in.spans);
  int peak = 0;
  double area = 0, first = steps.empty() ? 0 : steps.front().first, last = first;
  for (size_t i = 0; i < steps.size(); ++i) {
    peak = std::max(peak, steps[i].second);
    if (i + 1 < steps.size()) area += steps[i].second * (steps[i + 1].first - steps[i].first);
    last = steps[i].first;
  }
  int64_t with_subagents = 0;
  for (const ConversationSpan& c : *in.spans) with_subagents += c.has_subagents;
  j["conversations_with_subagents"] = with_subagents;
  j["peak_active"] = peak;
  j["mean_active"] = last > first ? area / (last - first) : double(peak);
  j["span_s"] = last - first;
  return j;
}

// Hit rates of the main conversations and of the sub-agents, per design and ideal.
json ByTypeJson(const ReportInput& in) {
  const Simulation& sim = *in.sim;
  json out = json::object();
  for (bool sub : {false, true}) {
    int64_t n = 0, prompt = 0, ideal = 0, hit[2] = {0, 0};
    for (size_t i = 0; i < sim.prompt_tokens().size(); ++i) {
      if (in.trace->requests[i].subagent != sub) continue;
      ++n;
      prompt += sim.prompt_tokens()[i];
      ideal += in.ideal->cedar_hits()[i];
      for (int d = 0; d < 2; ++d) hit[d] += sim.runs()[size_t(d)].outcomes[i].hit();
    }
    out[sub ? "subagent" : "main"] = {{"requests", n},
                                      {"prompt_tokens", prompt},
                                      {"ideal_hit_rate", Ratio(double(ideal), double(prompt))},
                                      {"cedar_hit_rate", Ratio(double(hit[0]), double(prompt))},
                                      {"decoder_only_lru_hit_rate", Ratio(double(hit[1]), double(prompt))}};
  }
  return out;
}

json IdealJson(const ReportInput& in) {
  const IdealDriver& id = *in.ideal;
  const auto& n = in.sim->prompt_tokens();
  int64_t prompt = 0, c = 0, d = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    prompt += n[i];
    c += id.cedar_hits()[i];
    d += id.decoder_only_hits()[i];
  }
  return {{"cedar", {{"hit_tokens", c}, {"hit_rate", Ratio(double(c), double(prompt))}}},
          {"decoder-only-lru", {{"hit_tokens", d}, {"hit_rate", Ratio(double(d), double(prompt))}}},
          {"working_set_bytes", {{"cedar", id.cedar_bytes()}, {"decoder-only-lru", id.decoder_only_bytes()}}}};
}

// The smallest sweep budget at which each design is within kIdealReachedWithin of its ideal.
json KneeJson(const ReportInput& in, const json& ideal) {
  json j = {{"auto", in.sweep_auto}, {"within", kIdealReachedWithin}};
  const double ic = ideal["cedar"]["hit_rate"].get<double>(), id = ideal["decoder-only-lru"]["hit_rate"].get<double>();
  json c = nullptr, d = nullptr;
  for (const SweepPoint& p : in.sim->sweep()) {
    if (c.is_null() && p.cedar.hit_rate() >= ic - kIdealReachedWithin) c = p.ram_budget;
    if (d.is_null() && p.decoder_only.hit_rate() >= id - kIdealReachedWithin) d = p.ram_budget;
  }
  j["cedar_reaches_ideal_at"] = c;
  j["decoder_only_reaches_ideal_at"] = d;
  return j;
}

// --servers N: hit tokens and rates per tier of the cluster, beside one server of the same
// budgets (the cedar design) and the ideal (one server that never evicts).
json ClusterJson(const ClusterSim& c, const Simulation& sim, const json& ideal) {
  const ClusterTotals& t = c.totals();
  const ClusterConfig& cc = c.config();
  return {{"servers", cc.servers},
          {"routing", RoutingName(cc.routing)},
          {"shared_ram_budget", cc.shared_ram},
          {"ram_budget_per_server", sim.config().ram_budget},
          {"requests", t.requests},
          {"prompt_tokens", t.prompt_tokens},
          {"hit_tokens", {{"local_ram", t.hit_ram}, {"local_disk", t.hit_disk}, {"shared", t.hit_shared}, {"miss", t.miss()}}},
          {"hit_rate_by_tier", {{"local_ram", t.Rate(t.hit_ram)}, {"local_disk", t.Rate(t.hit_disk)},
                                {"shared", t.Rate(t.hit_shared)}, {"miss", t.Rate(t.miss())}}},
          {"hit_rate", t.Rate(t.hit_ram + t.hit_disk + t.hit_shared)},
          {"one_server_hit_rate", sim.runs()[0].totals.hit_rate()},
          {"ideal_hit_rate", ideal["cedar"]["hit_rate"]},
          {"shared_peak_bytes", t.shared_peak_bytes},
          {"shared_evictions", t.shared_evictions},
          {"requests_per_server", t.server_requests}};
}

}  // namespace

json BuildReportJson(const ReportInput& in) {
  const Simulation& sim = *in.sim;
  const SimConfig& cfg = sim.config();
  const ModelConfig& m = cfg.model;
  const StateBytes bytes = ComputeStateBytes(m, cfg.page_tokens, cfg.block_tokens, cfg.kv);
  json report;
  report["run"] = {{"command", in.command_line}, {"load_s", in.load_s}, {"simulate_s", in.simulate_s},
                   {"calibrate_s", in.calibrate_s}};
  report["model"] = {{"name", in.model_name}, {"n_layers", m.n_layers}, {"n_encoder_layers", m.n_encoder_layers},
                     {"window", m.window}, {"head_dim", m.head_dim}, {"dim", m.dim},
                     {"cedar_kv_dtype", KvDtypeName(cfg.kv.cedar)},
                     {"decoder_only_kv_dtype", KvDtypeName(cfg.kv.decoder_only)},
                     {"cedar_bytes_per_token", CedarBytesPerToken(m, cfg.kv.cedar)},
                     {"decoder_only_bytes_per_token", DecoderOnlyBytesPerToken(m, cfg.kv.decoder_only)},
                     {"snapshot_bytes", bytes.Snapshot(m, m.window)},
                     {"cedar_page_bytes", bytes.cedar_page}, {"decoder_only_block_bytes", bytes.decoder_only_page}};
  report["cache"] = {{"page_tokens", cfg.page_tokens}, {"decoder_only_block_tokens", cfg.block_tokens},
                     {"cedar_node_pages", cache::PrefixCacheConfig{}.max_node_pages},
                     {"decoder_only_node_blocks", CacheSim::DecoderOnlyNodeBlocks(cfg)},
                     {"ram_budget", cfg.ram_budget}, {"disk_budget", cfg.disk_budget}, {"sweep_ram", cfg.sweep_ram},
                     {"payload_scale", cfg.payload_scale}, {"cedar_restore_policy", RestorePolicyName(cfg.restore)},
                     {"cedar_decoder_policy", SimDecoderName(cfg.decoder)}};
  report["cost_model"] = {{"source", cfg.cost.source},
                          {"units_per_s", cfg.cost.has_time() ? json(cfg.cost.units_per_s) : json(nullptr)},
                          {"disk_bytes_per_s", cfg.cost.disk_bytes_per_s}, {"note", cfg.cost.note}};
  report["trace"] = TraceJson(*in.trace);
  report["arrival"] = ArrivalJson(in);
  report["ideal"] = IdealJson(in);
  report["by_conversation_type"] = ByTypeJson(in);
  json designs = json::object();
  for (const DesignRun& run : sim.runs()) designs[DesignName(run.design)] = DesignJson(run, sim);
  report["designs"] = designs;
  report["sweep"] = SweepJson(sim);
  report["working_set"] = KneeJson(in, report["ideal"]);
  if (in.cluster) report["cluster"] = ClusterJson(*in.cluster, sim, report["ideal"]);
  json requests = json::array();
  const bool time = cfg.cost.has_time();
  for (size_t i = 0; i < in.trace->requests.size() && i < sim.prompt_tokens().size(); ++i) {
    const TraceRequest& r = in.trace->requests[i];
    json j = {{"i", i}, {"t", r.t}, {"session", r.session}, {"subagent", r.subagent}, {"source", r.source},
              {"prompt_tokens", r.input_tokens}, {"output_tokens", r.output_tokens},
              {"ideal_hit", in.ideal->cedar_hits()[i]}};
    for (const DesignRun& run : sim.runs()) j[DesignName(run.design)] = OutcomeJson(run.design, run.outcomes[i], time);
    if (in.cluster && i < in.cluster->outcomes().size()) {
      const ClusterOutcome& co = in.cluster->outcomes()[i];
      j["cluster"] = {{"server", co.server}, {"hit_ram", co.hit_ram}, {"hit_disk", co.hit_disk}, {"hit_shared", co.hit_shared}};
    }
    if (in.live && i < in.live->outcomes().size()) j["live"] = LiveRequestJson(in.live->outcomes()[i], sim.runs()[0].outcomes[i]);
    requests.push_back(std::move(j));
  }
  report["requests"] = std::move(requests);
  if (in.live) {
    report["live"] = LiveJson(*in.live, sim);
    report["run"]["live_wall_s"] = in.live->wall_s();
  }
  return report;
}

namespace {
std::string Units(double u) {
  const char* suffix[] = {"", "K", "M", "G", "T", "P", "E"};
  int k = 0;
  while (std::abs(u) >= 1000 && k < 6) {
    u /= 1000;
    ++k;
  }
  return fmt::format("{:.3g}{}", u, suffix[k]);
}
}  // namespace

std::string SummaryTable(const json& report) {
  std::string s;
  if (report.contains("arrival")) {
    const json& a = report["arrival"];
    const json& id = report["ideal"];
    s += fmt::format("arrival {}{}: {} conversations, at most {} active at once (mean {:.1f}); ideal hit rate {:.3f} "
                     "(a cache that never evicts: Cedar's pages would hold {})\n",
                     a["model"].get<std::string>(), a["model"] == "recorded" ? " (the default: every file starts at t = 0)" : "",
                     a["conversations"].get<int64_t>(), a.value("peak_active", 0), a.value("mean_active", 0.0),
                     id["cedar"]["hit_rate"].get<double>(),
                     FormatBudget(id["working_set_bytes"]["cedar"].get<uint64_t>()));
  }
  if (report.contains("by_conversation_type") && report["by_conversation_type"]["subagent"]["requests"] > 0) {
    const json& t = report["by_conversation_type"];
    s += fmt::format("hit rate by conversation type: main {:.3f} (ideal {:.3f}, decoder-only LRU {:.3f}), sub-agents {:.3f} "
                     "(ideal {:.3f}, decoder-only LRU {:.3f})\n",
                     t["main"]["cedar_hit_rate"].get<double>(), t["main"]["ideal_hit_rate"].get<double>(),
                     t["main"]["decoder_only_lru_hit_rate"].get<double>(), t["subagent"]["cedar_hit_rate"].get<double>(),
                     t["subagent"]["ideal_hit_rate"].get<double>(), t["subagent"]["decoder_only_lru_hit_rate"].get<double>());
  }
  if (report.contains("working_set") && report["sweep"].size() >= 2) {
    const json& w = report["working_set"];
    const auto at = [](const json& v) {
      return v.is_null() ? std::string("not within the sweep") : "at " + FormatBudget(v.get<uint64_t>());
    };
    s += fmt::format("working set: Cedar reaches the ideal (within {:g}): {}; the decoder-only LRU baseline: {}\n",
                     w["within"].get<double>(), at(w["cedar_reaches_ideal_at"]), at(w["decoder_only_reaches_ideal_at"]));
  }
  s += fmt::format("{:<32} {:>9} {:>17} {:>14} {:>12} {:>12} {:>10} {:>10}\n", "design", "hit rate",
                              "hit RAM / disk", "prefill units", "saved vs", "saved vs", "TTFT p50", "TTFT p99");
  s += fmt::format("{:<32} {:>9} {:>17} {:>14} {:>12} {:>12} {:>10} {:>10}\n", "", "", "(tokens)", "",
                   "dec. no $", "CED no $", "(s)", "(s)");
  for (Design design : kAllDesigns) {
    const json& d = report.at("designs").at(DesignName(design));
    const bool cache = d.contains("evictions");
    const std::string hits =
        cache ? Units(d["hit_tokens"]["ram"].get<double>()) + " / " + Units(d["hit_tokens"]["disk"].get<double>()) : "-";
    std::string p50 = "-", p99 = "-";
    if (!d["ttft_s"].is_null()) {
      p50 = fmt::format("{:.3g}", d["ttft_s"]["p50"].get<double>());
      p99 = fmt::format("{:.3g}", d["ttft_s"]["p99"].get<double>());
    }
    s += fmt::format("{:<32} {:>9} {:>17} {:>14} {:>11.1f}% {:>11.1f}% {:>10} {:>10}\n", d["label"].get<std::string>(),
                     cache ? fmt::format("{:.3f}", d["hit_rate"].get<double>()) : "-", hits,
                     Units(d["prefill_units"]["total"].get<double>()),
                     100 * d["saved_vs_decoder_only_no_cache"].get<double>(),
                     100 * d["saved_vs_ced_no_cache"].get<double>(), p50, p99);
  }
  if (report.contains("cluster")) {
    const json& c = report["cluster"];
    const json& r = c["hit_rate_by_tier"];
    const uint64_t shared = c["shared_ram_budget"].get<uint64_t>();
    s += fmt::format("cluster: {} servers ({} each), {} routing, shared tier {}: hit rate {:.3f} = local RAM {:.3f} + local "
                     "disk {:.3f} + shared {:.3f}; miss {:.3f} (one server: {:.3f}, ideal {:.3f}); shared tier peak {}, "
                     "{} evictions\n",
                     c["servers"].get<int>(), FormatBudget(c["ram_budget_per_server"].get<uint64_t>()),
                     c["routing"].get<std::string>(), shared ? FormatBudget(shared) : std::string("none"),
                     c["hit_rate"].get<double>(), r["local_ram"].get<double>(), r["local_disk"].get<double>(),
                     r["shared"].get<double>(), r["miss"].get<double>(), c["one_server_hit_rate"].get<double>(),
                     c["ideal_hit_rate"].get<double>(), FormatBudget(c["shared_peak_bytes"].get<uint64_t>()),
                     c["shared_evictions"].get<int64_t>());
  }
  if (report.contains("live")) s += LiveSummary(report["live"]);
  return s;
}

}  // namespace cedar::profile
