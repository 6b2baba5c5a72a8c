// The report folder: report.json, plot data (data/*.dat), gnuplot scripts (plots/*.gp), the
// images (drawn by gnuplot when it is installed) and index.html.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "profile/report.h"
#include "profile/report_live.h"

namespace cedar::profile {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kGiB = double(1ull << 30);
const char* const kColor[] = {"#1b7837", "#c51b7d", "#2166ac", "#7f7f7f"};  // kAllDesigns order

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::string Html(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '&': r += "&amp;"; break;
      case '"': r += "&quot;"; break;
      default: r += c;
    }
  }
  return r;
}

std::string ShellQuote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// data/timeline.dat: one row per request (see the header line for the columns).
void WriteTimeline(const fs::path& dir, const Simulation& sim, const Trace& trace) {
  const auto& runs = sim.runs();
  const auto& n = sim.prompt_tokens();
  const size_t window = std::clamp<size_t>(n.size() / 10, 1, 50);
  std::string s = fmt::format(
      "# request t_s cedar_hit_rate_last{0} declru_hit_rate_last{0} cedar_hit_rate_cum declru_hit_rate_cum "
      "cum_saved_units_cedar cum_saved_units_declru cum_saved_units_ced_nocache cedar_ram_gib cedar_disk_gib "
      "declru_ram_gib declru_disk_gib\n", window);
  int64_t cum_tokens = 0, cum_hit[2] = {0, 0}, saved[3] = {0, 0, 0};
  for (size_t i = 0; i < n.size(); ++i) {
    cum_tokens += n[i];
    double win[2];
    for (int d = 0; d < 2; ++d) {
      cum_hit[d] += runs[size_t(d)].outcomes[i].hit();
      int64_t wt = 0, wh = 0;
      for (size_t k = i + 1 - std::min(window, i + 1); k <= i; ++k) {
        wt += n[k];
        wh += runs[size_t(d)].outcomes[k].hit();
      }
      win[d] = wt ? double(wh) / double(wt) : 0;
    }
    for (int d = 0; d < 3; ++d) saved[d] += runs[3].outcomes[i].units - runs[size_t(d)].outcomes[i].units;
    const Outcome& c = runs[0].outcomes[i];
    const Outcome& l = runs[1].outcomes[i];
    s += fmt::format("{} {:.3f} {:.5f} {:.5f} {:.5f} {:.5f} {} {} {} {:.5f} {:.5f} {:.5f} {:.5f}\n", i + 1,
                     trace.requests[i].t, win[0], win[1], double(cum_hit[0]) / double(cum_tokens),
                     double(cum_hit[1]) / double(cum_tokens), saved[0], saved[1], saved[2], double(c.ram_bytes) / kGiB,
                     double(c.disk_bytes) / kGiB, double(l.ram_bytes) / kGiB, double(l.disk_bytes) / kGiB);
  }
  WriteText(dir / "data" / "timeline.dat", s);
}

// data/ttft_<design>.dat: sorted TTFT (or units without a cost model) and the fraction <= it.
void WriteTtft(const fs::path& dir, const Simulation& sim) {
  const bool time = sim.config().cost.has_time();
  for (const DesignRun& run : sim.runs()) {
    std::vector<double> v;
    for (const Outcome& o : run.outcomes) v.push_back(time ? o.ttft_s : double(o.units));
    std::sort(v.begin(), v.end());
    std::string s = fmt::format("# {} fraction_of_requests\n", time ? "ttft_s" : "prefill_units");
    for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{:.6g} {:.6f}\n", v[i], double(i + 1) / double(v.size()));
    WriteText(dir / "data" / fmt::format("ttft_{}.dat", DesignName(run.design)), s);
  }
}

void WriteSweep(const fs::path& dir, const Simulation& sim) {
  const double base = double(sim.runs()[3].totals.units);
  std::string s = "# ram_budget_bytes cedar_hit_rate declru_hit_rate cedar_saved declru_saved (saved: prefill units "
                  "saved vs a decoder-only model without cache)\n";
  for (const SweepPoint& p : sim.sweep()) {
    s += fmt::format("{} {:.5f} {:.5f} {:.5f} {:.5f}\n", p.ram_budget, p.cedar.hit_rate(), p.decoder_only.hit_rate(),
                     base > 0 ? 1.0 - double(p.cedar.units) / base : 0,
                     base > 0 ? 1.0 - double(p.decoder_only.units) / base : 0);
  }
  WriteText(dir / "data" / "sweep.dat", s);
}

// data/conversations.dat: active conversations over time (steps), in the unit the plot uses.
struct TimeUnit {
  double seconds;
  const char* name;
};
TimeUnit PickTimeUnit(double span_s) {
  if (span_s > 3 * 3600) return {3600, "hours"};
  if (span_s > 180) return {60, "minutes"};
  return {1, "seconds"};
}
TimeUnit WriteConversations(const fs::path& dir, const std::vector<ConversationSpan>& spans) {
  const auto steps = ActiveOverTime(spans);
  const TimeUnit u = PickTimeUnit(steps.empty() ? 0 : steps.back().first - steps.front().first);
  std::string s = fmt::format("# time_{} active_conversations (from this time to the next row)\n", u.name);
  for (const auto& [t, k] : steps) s += fmt::format("{:.6g} {}\n", t / u.seconds, k);
  WriteText(dir / "data" / "conversations.dat", s);
  return u;
}

// Whether bytes.png says anything: a disk tier, or a RAM tier that did not sit at its budget
// (full from the first tenth of the requests on, it is a flat line at the budget).
bool BytesPlotInformative(const Simulation& sim) {
  if (sim.config().disk_budget > 0) return true;
  const double budget = double(sim.config().ram_budget);
  for (size_t d = 0; d < 2; ++d) {
    const auto& o = sim.runs()[d].outcomes;
    size_t first_full = o.size();
    for (size_t i = 0; i < o.size(); ++i) {
      if (double(o[i].ram_bytes) >= 0.9 * budget) {
        first_full = i;
        break;
      }
    }
    if (first_full > o.size() / 10) return true;
  }
  return false;
}

const char* kHeader =
    "set terminal pngcairo size 960,540 font 'sans,11'\nset grid\nset key left top\nset border 3\nset tics nomirror\n";

struct Figure {
  std::string name;     // png and gp base name
  std::string caption;  // how to read it
  std::string script;
};

std::vector<Figure> Figures(const Simulation& sim, const nlohmann::json& report, TimeUnit tu) {
  const bool time = sim.config().cost.has_time();
  const size_t window = std::clamp<size_t>(sim.prompt_tokens().size() / 10, 1, 50);
  std::vector<Figure> f;
  f.push_back({"hit_rate",
               "Share of prompt tokens served from the cache (solid: last " + std::to_string(window) +
                   " requests, dashed: since the start); higher is better, and the gap between the lines is what "
                   "the smaller per-token state buys at the same RAM budget.",
               fmt::format("set output 'hit_rate.png'\nset title 'Prefix-cache hit rate over the trace'\n"
                           "set xlabel 'request (arrival order)'\nset ylabel 'hit rate (tokens)'\nset yrange [0:1]\n"
                           "set key below\n"
                           "plot 'data/timeline.dat' u 1:3 w l lw 2 lc rgb '{0}' t 'Cedar (last {2})', "
                           "'' u 1:4 w l lw 2 lc rgb '{1}' t 'decoder-only LRU (last {2})', "
                           "'' u 1:5 w l lw 2 dt 2 lc rgb '{0}' t 'Cedar (cumulative)', "
                           "'' u 1:6 w l lw 2 dt 2 lc rgb '{1}' t 'decoder-only LRU (cumulative)'\n",
                           kColor[0], kColor[1], window)});
  f.push_back({"compute_saved",
               "Prefill layer-token units saved so far against a decoder-only model with no cache; the steeper the "
               "line, the more each request saves (CED without a cache saves by its architecture alone).",
               fmt::format("set output 'compute_saved.png'\nset title 'Cumulative prefill compute saved vs a "
                           "decoder-only model without cache'\nset xlabel 'request (arrival order)'\n"
                           "set ylabel 'layer-token units saved'\nset format y '%.1s%c'\n"
                           "plot 'data/timeline.dat' u 1:7 w l lw 2 lc rgb '{0}' t 'Cedar', "
                           "'' u 1:8 w l lw 2 lc rgb '{1}' t 'decoder-only LRU', "
                           "'' u 1:9 w l lw 2 lc rgb '{2}' t 'CED, no cache'\n",
                           kColor[0], kColor[1], kColor[2])});
  std::string plot = "plot ";
  for (size_t d = 0; d < 4; ++d) {
    plot += fmt::format("{}'data/ttft_{}.dat' u 1:2 w steps lw 2 lc rgb '{}' t '{}'", d ? ", " : "",
                        DesignName(kAllDesigns[d]), kColor[d], DesignLabel(kAllDesigns[d]));
  }
  f.push_back({"ttft_cdf",
               std::string(time ? "Estimated time to first token" : "Prefill units per request (no cost model given)") +
                   ": a point (x, y) says a share y of requests waited at most x; curves further left are better.",
               fmt::format("set output 'ttft_cdf.png'\nset title '{}'\nset xlabel '{}'\nset ylabel 'share of "
                           "requests'\nset logscale x\nset format x '%.0s%c'\nset yrange [0:1]\nset key below\n{}\n",
                           time ? "Time to first token (estimated), CDF" : "Prefill units per request, CDF",
                           time ? "TTFT (s)" : "prefill layer-token units", plot)});
  f.push_back({"conversations",
               "Conversations active at once under the arrival model (" + report["arrival"]["model"].get<std::string>() +
                   "): a conversation is active from its first request to its last, its sub-agents included. The more "
                   "overlap, the more prefixes compete for the same RAM.",
               fmt::format("set output 'conversations.png'\nset title 'Concurrent conversations ({})'\n"
                           "set xlabel 'time ({})'\nset ylabel 'active conversations'\nset yrange [0:*]\nunset key\n"
                           "plot 'data/conversations.dat' u 1:2 w steps lw 2 lc rgb '{}'\n",
                           report["arrival"]["model"].get<std::string>(), tu.name, kColor[2])});
  const double budget = double(sim.config().ram_budget) / kGiB;
  if (BytesPlotInformative(sim)) f.push_back({"bytes",
               "Bytes each cache holds after every request, by tier; RAM stays under its budget (dotted), and what "
               "spills goes to disk when a disk tier is configured.",
               fmt::format("set output 'bytes.png'\nset title 'Cache bytes per tier over the trace'\n"
                           "set xlabel 'request (arrival order)'\nset ylabel 'GiB'\nset key below\n"
                           "set yrange [0:*]\nset offsets 0,0,graph 0.1,0\n"
                           "plot 'data/timeline.dat' u 1:10 w l lw 2 lc rgb '{0}' t 'Cedar RAM', "
                           "'' u 1:11 w l lw 2 dt 2 lc rgb '{0}' t 'Cedar disk', "
                           "'' u 1:12 w l lw 2 lc rgb '{1}' t 'decoder-only LRU RAM', "
                           "'' u 1:13 w l lw 2 dt 2 lc rgb '{1}' t 'decoder-only LRU disk', "
                           "{2} w l dt 3 lc rgb 'black' t 'RAM budget'\n",
                           kColor[0], kColor[1], budget)});
  if (sim.sweep().size() >= 2) {
    const double ideal = report["ideal"]["cedar"]["hit_rate"].get<double>();
    const double ideal_dec = report["ideal"]["decoder-only-lru"]["hit_rate"].get<double>();
    const std::string ideal_lines =
        std::abs(ideal - ideal_dec) < 0.0005
            ? fmt::format("{:.6f} w l lw 1.5 dt 2 lc rgb 'black' t 'ideal (a cache that never evicts)'", ideal)
            : fmt::format("{:.6f} w l lw 1.5 dt 2 lc rgb 'black' t 'ideal, Cedar', {:.6f} w l lw 1.5 dt 3 lc rgb "
                          "'black' t 'ideal, decoder-only'", ideal, ideal_dec);
    f.push_back({"sweep",
                 "The working set: the same trace at each RAM budget, hit rate (left) and prefill compute saved against "
                 "a decoder-only model without cache (right), for Cedar and the decoder-only baseline; the dashed "
                 "line is the ideal, what a cache that never evicts serves. Where Cedar's curve meets it, more RAM "
                 "buys nothing.",
                 fmt::format("set terminal pngcairo size 1200,560 font 'sans,11'\nset output 'sweep.png'\n"
                             "set multiplot layout 1,2 title 'Working set: RAM budget sweep'\nset logscale x 2\n"
                             "set format x '%.0b %BB'\nset xtics rotate by -30\nset xlabel 'RAM budget'\n"
                             "set key below\nset ylabel 'hit rate (tokens)'\nset yrange [0:1.02]\n"
                             "plot 'data/sweep.dat' u 1:2 w lp lw 2 pt 7 lc rgb '{0}' t 'Cedar', "
                             "'' u 1:3 w lp lw 2 pt 7 lc rgb '{1}' t 'decoder-only LRU', {2}\n"
                             "set ylabel 'prefill saved vs decoder-only without cache'\nset yrange [0:1.02]\n"
                             "plot 'data/sweep.dat' u 1:4 w lp lw 2 pt 7 lc rgb '{0}' t 'Cedar', "
                             "'' u 1:5 w lp lw 2 pt 7 lc rgb '{1}' t 'decoder-only LRU'\nunset multiplot\n",
                             kColor[0], kColor[1], ideal_lines)});
  }
  return f;
}

bool HaveGnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

std::string Pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

// 337508992 -> "337.5M"
std::string Human(double v) {
  const char* suffix[] = {"", "K", "M", "G", "T", "P"};
  int k = 0;
  while (std::abs(v) >= 1000 && k < 5) {
    v /= 1000;
    ++k;
  }
  return k == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}{}", v, suffix[k]);
}

std::string KeyTable(const json& report) {
  std::string h = "<table><tr><th>design</th><th>hit rate</th><th>hit tokens RAM / disk</th><th>prefill units</th>"
                  "<th>saved vs decoder-only, no cache</th><th>saved vs CED, no cache</th><th>TTFT p50 / p90 / p99 "
                  "(s)</th><th>evictions</th><th>encoder replays (evicted / never stored)</th></tr>\n";
  for (Design d : kAllDesigns) {
    const json& j = report.at("designs").at(DesignName(d));
    const bool cache = HasCache(d);
    std::string ttft = "-";
    if (!j["ttft_s"].is_null()) {
      ttft = fmt::format("{:.3g} / {:.3g} / {:.3g}", j["ttft_s"]["p50"].get<double>(), j["ttft_s"]["p90"].get<double>(),
                         j["ttft_s"]["p99"].get<double>());
    }
    std::string ev = "-", rp = "-";
    if (cache) {
      const json& e = j["evictions"];
      ev = fmt::format("snapshots dropped {} / spilled {}; pages dropped {} / spilled {}; disk entries deleted {}",
                       Human(e["snapshots_dropped"].get<double>()), Human(e["snapshots_spilled_to_disk"].get<double>()),
                       Human(e["pages_dropped"].get<double>()), Human(e["pages_spilled_to_disk"].get<double>()),
                       Human(e["disk_entries_deleted"].get<double>()));
      if (d == Design::kCedar) {
        rp = fmt::format("{} / {}", j["replays"]["encoder_replays_snapshot_evicted"].get<int64_t>(),
                         j["replays"]["encoder_replays_no_snapshot_stored"].get<int64_t>());
      }
    }
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{}</td></tr>\n",
                     Html(j["label"].get<std::string>()), cache ? fmt::format("{:.3f}", j["hit_rate"].get<double>()) : "-",
                     cache ? Human(j["hit_tokens"]["ram"].get<double>()) + " / " + Human(j["hit_tokens"]["disk"].get<double>())
                           : "-",
                     Human(j["prefill_units"]["total"].get<double>()), Pct(j["saved_vs_decoder_only_no_cache"].get<double>()),
                     Pct(j["saved_vs_ced_no_cache"].get<double>()), ttft, ev, rp);
  }
  return h + "</table>\n";
}

std::string SweepTable(const json& report) {
  std::string h = "<table><tr><th>RAM budget</th><th>Cedar hit rate</th><th>decoder-only LRU hit rate</th>"
                  "<th>Cedar saved vs decoder-only, no cache</th><th>decoder-only LRU saved vs decoder-only, no "
                  "cache</th></tr>\n";
  for (const json& p : report["sweep"]) {
    h += fmt::format("<tr><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{}</td><td>{}</td></tr>\n",
                     FormatBudget(p["ram_budget"].get<uint64_t>()), p["cedar"]["hit_rate"].get<double>(),
                     p["decoder-only-lru"]["hit_rate"].get<double>(),
                     Pct(p["cedar"]["saved_vs_decoder_only_no_cache"].get<double>()),
                     Pct(p["decoder-only-lru"]["saved_vs_decoder_only_no_cache"].get<double>()));
  }
  return h + "</table>\n";
}

// What the report shows first: the arrival model, the ideal, the working set, the concurrency.
std::string FirstSection(const json& r) {
  const json& a = r["arrival"];
  const json& id = r["ideal"];
  const json& w = r["working_set"];
  std::string h = fmt::format(
      "<p class=\"note\"><b>Arrival model: {}</b>{}. {} conversations, at most {} active at once (mean {:.1f} over the "
      "run).</p>\n",
      Html(a["model"].get<std::string>()),
      a["model"] == "recorded" ? " (the default: every trace file starts at t = 0, so all conversations overlap; "
                                 "--arrival poisson:R or concurrency:N model a deployment, see docs/PROFILE.md)"
                               : "",
      a["conversations"].get<int64_t>(), a.value("peak_active", 0), a.value("mean_active", 0.0));
  h += "<table><tr><th></th><th>hit rate</th><th>RAM to reach it</th></tr>\n";
  const auto at = [&](const json& v) { return v.is_null() ? std::string("beyond the sweep") : FormatBudget(v.get<uint64_t>()); };
  h += fmt::format("<tr><td>ideal (a cache that never evicts, Cedar's pages and n &minus; 1 rule)</td><td>{:.3f}</td>"
                   "<td>{} (everything the trace ever caches)</td></tr>\n",
                   id["cedar"]["hit_rate"].get<double>(), FormatBudget(id["working_set_bytes"]["cedar"].get<uint64_t>()));
  h += fmt::format("<tr><td>ideal, decoder-only blocks</td><td>{:.3f}</td><td>{}</td></tr>\n",
                   id["decoder-only-lru"]["hit_rate"].get<double>(),
                   FormatBudget(id["working_set_bytes"]["decoder-only-lru"].get<uint64_t>()));
  if (r["sweep"].size() >= 2) {
    h += fmt::format("<tr><td>Cedar within {:g} of its ideal (sweep)</td><td></td><td>{}</td></tr>\n",
                     w["within"].get<double>(), at(w["cedar_reaches_ideal_at"]));
    h += fmt::format("<tr><td>decoder-only LRU within {:g} of its ideal (sweep)</td><td></td><td>{}</td></tr>\n",
                     w["within"].get<double>(), at(w["decoder_only_reaches_ideal_at"]));
  }
  h += "</table>\n";
  const json& t = r["by_conversation_type"];
  if (t["subagent"]["requests"].get<int64_t>() > 0) {
    h += "<table><tr><th>conversation type</th><th>requests</th><th>prompt tokens</th><th>ideal</th><th>Cedar</th>"
         "<th>decoder-only LRU</th></tr>\n";
    for (const char* k : {"main", "subagent"}) {
      const json& x = t[k];
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td></tr>\n",
                       std::string(k) == "main" ? "main conversations" : "sub-agents", x["requests"].get<int64_t>(),
                       Human(x["prompt_tokens"].get<double>()), x["ideal_hit_rate"].get<double>(),
                       x["cedar_hit_rate"].get<double>(), x["decoder_only_lru_hit_rate"].get<double>());
    }
    h += "</table>\n";
  }
  return h;
}

std::string IndexHtml(const json& r, const std::vector<Figure>& figures, const ReportFiles& files) {
  const json& t = r["trace"];
  const json& m = r["model"];
  const json& c = r["cache"];
  std::string h =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>cedar profile</title><style>"
      "body{font-family:sans-serif;max-width:1250px;margin:2em auto;color:#222}table{border-collapse:collapse;"
      "margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}"
      "td:first-child{text-align:left}figure{margin:1.5em 0}img{max-width:100%}figcaption{color:#555}"
      ".note{background:#fff8e0;padding:6px 10px}</style></head><body>\n<h1>Cedar prefix-cache profile</h1>\n";
  h += FirstSection(r);
  h += fmt::format("<p>Trace: {} requests in {} sessions from {} file(s), {} prompt tokens, {} malformed entries "
                   "skipped. Model: {} (L = {}, E = {}, W = {}); Cedar caches {:.0f} bytes per token ({}) plus {} bytes per "
                   "boundary snapshot, a decoder-only model of the same size {:.0f} bytes per token ({}).</p>\n",
                   t["requests"].get<int64_t>(), t["sessions"].get<int64_t>(), t["files"].size(),
                   Human(t["prompt_tokens"].get<double>()), t["malformed_skipped"].get<int64_t>(),
                   Html(m["name"].get<std::string>()), m["n_layers"].get<int>(), m["n_encoder_layers"].get<int>(),
                   m["window"].get<int>(), m["cedar_bytes_per_token"].get<double>(),
                   m["cedar_kv_dtype"].get<std::string>(), m["snapshot_bytes"].get<uint64_t>(),
                   m["decoder_only_bytes_per_token"].get<double>(), m["decoder_only_kv_dtype"].get<std::string>());
  h += fmt::format("<p>Budgets, the same for both caches: RAM {}, disk {}. Pages of {} tokens (Cedar), "
                   "blocks of {} tokens (decoder-only LRU).</p>\n",
                   FormatBudget(c["ram_budget"].get<uint64_t>()),
                   c["disk_budget"].get<uint64_t>() ? FormatBudget(c["disk_budget"].get<uint64_t>()) : std::string("none"),
                   c["page_tokens"].get<int>(), c["decoder_only_block_tokens"].get<int>());
  if (c["payload_scale"].get<uint64_t>() > 1) {
    h += fmt::format("<p class=\"note\">Payloads and budgets were divided by {} (--payload-scale) and bytes scaled "
                     "back; the disk tier's fixed entry headers do not scale, so its numbers are approximate.</p>\n",
                     c["payload_scale"].get<uint64_t>());
  }
  const json& cm = r["cost_model"];
  h += "<p class=\"note\">Cost model: " +
       (cm["units_per_s"].is_null() ? std::string("none (times are not estimated; pass --calibrate or --units-per-s)")
                                    : Html(cm["source"].get<std::string>()) + ". " + Html(cm["note"].get<std::string>())) +
       "</p>\n<h2>Key numbers</h2>\n" + KeyTable(r);
  if (r.contains("live")) h += LiveHtml(r["live"], &Html);
  if (r.contains("cluster")) {  // --servers N: hit rates per tier (docs/PROFILE.md, "Several servers")
    const json& cl = r["cluster"];
    const uint64_t shared = cl["shared_ram_budget"].get<uint64_t>();
    h += fmt::format("<h2>Several servers</h2>\n<p>{} servers with {} of RAM each, {} routing, shared tier {}: hit rate "
                     "{:.3f} (one server {:.3f}, ideal {:.3f}); the shared tier peaked at {} with {} evictions.</p>\n"
                     "<table><tr><th>tier</th><th>prompt tokens</th><th>share</th></tr>\n",
                     cl["servers"].get<int>(), FormatBudget(cl["ram_budget_per_server"].get<uint64_t>()),
                     Html(cl["routing"].get<std::string>()), shared ? FormatBudget(shared) : std::string("none"),
                     cl["hit_rate"].get<double>(), cl["one_server_hit_rate"].get<double>(),
                     cl["ideal_hit_rate"].get<double>(), FormatBudget(cl["shared_peak_bytes"].get<uint64_t>()),
                     cl["shared_evictions"].get<int64_t>());
    for (const char* tier : {"local_ram", "local_disk", "shared", "miss"}) {
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td></tr>\n", tier, cl["hit_tokens"][tier].get<int64_t>(),
                       cl["hit_rate_by_tier"][tier].get<double>());
    }
    h += "</table>\n";
  }
  h += "<h2>Figures</h2>\n";
  if (!files.plot_note.empty()) h += "<p class=\"note\">" + Html(files.plot_note) + "</p>\n";
  for (const Figure& f : figures) {
    if (std::find(files.images.begin(), files.images.end(), f.name + ".png") == files.images.end()) continue;
    h += fmt::format("<figure><img src=\"{}.png\" alt=\"{}\"><figcaption>{}</figcaption></figure>\n", f.name, f.name,
                     Html(f.caption));
  }
  if (std::none_of(figures.begin(), figures.end(), [](const Figure& f) { return f.name == "bytes"; })) {
    h += "<p>No <code>bytes.png</code>: without a disk tier both caches sat at their RAM budget from early on (a flat "
         "line); per-request bytes are in report.json and data/timeline.dat.</p>\n";
  }
  h += "<h2>Budget sweep</h2>\n" + SweepTable(r);
  if (!t["issues"].empty()) {
    h += "<h2>Malformed entries (skipped)</h2>\n<ul>\n";
    size_t k = 0;
    for (const json& is : t["issues"]) {
      if (++k > 100) break;
      h += "<li>" + Html(is["where"].get<std::string>()) + ": " + Html(is["what"].get<std::string>()) + "</li>\n";
    }
    h += "</ul>\n";
  }
  h += "<p>Everything above, per request too, is in <a href=\"report.json\">report.json</a>; plot data in "
       "<code>data/</code>, gnuplot scripts in <code>plots/</code>.</p>\n</body></html>\n";
  return h;
}

}  // namespace

ReportFiles WriteReport(const std::string& dir_s, const json& report, const ReportInput& in, bool plots) {
  const fs::path dir(dir_s);
  fs::create_directories(dir / "data");
  fs::create_directories(dir / "plots");
  ReportFiles files;
  files.json_path = (dir / "report.json").string();
  WriteText(files.json_path, report.dump(1) + "\n");
  const Simulation& sim = *in.sim;
  WriteTimeline(dir, sim, *in.trace);
  WriteTtft(dir, sim);
  WriteSweep(dir, sim);
  const TimeUnit tu = WriteConversations(dir, in.spans ? *in.spans : std::vector<ConversationSpan>{});
  std::vector<Figure> figures = Figures(sim, report, tu);
  if (in.live) {
    for (LiveFigure& f : WriteLiveData(dir, *in.live, sim)) figures.push_back({f.name, f.caption, f.script});
  }
  for (const Figure& f : figures) WriteText(dir / "plots" / (f.name + ".gp"), kHeader + f.script);
  if (sim.prompt_tokens().empty()) {
    files.plot_note = "The trace has no requests: nothing to plot.";
  } else if (!plots) {
    files.plot_note = "Plots were not drawn (--no-plots); run `gnuplot plots/<name>.gp` in this folder to draw them.";
  } else if (!HaveGnuplot()) {
    files.plot_note = "gnuplot is not installed (Debian: gnuplot-nox), so no images were drawn; the data is in data/ "
                      "and `gnuplot plots/<name>.gp` in this folder draws each figure.";
  } else {
    for (const Figure& f : figures) {
      fs::remove(dir / (f.name + ".png"));
      const std::string cmd = "cd " + ShellQuote(dir.string()) + " && gnuplot " + ShellQuote("plots/" + f.name + ".gp") +
                              " 2>>" + ShellQuote("plots/gnuplot.log");
      if (std::system(cmd.c_str()) == 0 && fs::exists(dir / (f.name + ".png"))) files.images.push_back(f.name + ".png");
      else files.plot_note = "gnuplot failed on some figures; see plots/gnuplot.log.";
    }
  }
  files.html_path = (dir / "index.html").string();
  WriteText(files.html_path, IndexHtml(report, figures, files));
  return files;
}

}  // namespace cedar::profile
