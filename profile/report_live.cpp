// The live part of the report: what `cedar serve` answered next to the simulated Cedar design.
#include "profile/report_live.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace cedar::profile {

using nlohmann::json;

LiveAgreement CompareLive(const std::vector<Outcome>& cedar, const std::vector<LiveOutcome>& live) {
  LiveAgreement a;
  for (size_t i = 0; i < live.size() && i < cedar.size(); ++i) {
    if (!live[i].ok) {
      ++a.errors;
      continue;
    }
    ++a.compared;
    a.sim_hit_tokens += cedar[i].hit();
    a.live_hit_tokens += live[i].cached_tokens;
    if (cedar[i].hit() == live[i].cached_tokens) ++a.equal;
    else a.differing.push_back(i);
  }
  return a;
}

namespace {

json Spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return {{"mean", v.empty() ? 0.0 : sum / double(v.size())}, {"p50", Percentile(v, 0.5)},
          {"p90", Percentile(v, 0.9)}, {"p99", Percentile(v, 0.99)}, {"max", v.empty() ? 0.0 : v.back()}};
}

}  // namespace

json LiveRequestJson(const LiveOutcome& o, const Outcome& simulated) {
  json j = {{"ok", o.ok}, {"sent_s", o.sent_s}, {"late_s", o.late_s}, {"latency_s", o.latency_s}};
  if (!o.ok) {
    j["status"] = o.http_status;
    j["error"] = o.error;
    return j;
  }
  j["cached_tokens"] = o.cached_tokens;
  j["cached_by_tier"] = {{"live", o.cached_live}, {"ram", o.cached_ram}, {"disk", o.cached_disk}};
  j["snapshot_hit"] = o.snapshot_hit;
  j["encoder_replay_rows"] = o.encoder_replay_rows;
  j["prefill_units"] = o.prefill_units;
  j["output_tokens"] = o.output_tokens;
  j["ttft_s"] = o.ttft_s;
  j["equals_simulated_hit"] = o.cached_tokens == simulated.hit();
  return j;
}

json LiveJson(const LiveDriver& live, const Simulation& sim) {
  const LiveTarget& t = live.target();
  const LiveOptions& opt = live.options();
  const std::vector<LiveOutcome>& out = live.outcomes();
  const std::vector<Outcome>& cedar = sim.runs()[0].outcomes;
  const std::vector<int64_t>& prompt = sim.prompt_tokens();
  int64_t answered = 0, prompt_tokens = 0, hit_live = 0, hit_ram = 0, hit_disk = 0, units = 0, replays = 0,
          snapshot_hits = 0, output_tokens = 0;
  std::vector<double> ttft, latency, late;
  std::map<std::string, int64_t> by_status;
  json first_errors = json::array();
  for (size_t i = 0; i < out.size(); ++i) {
    const LiveOutcome& o = out[i];
    late.push_back(o.late_s);
    if (!o.ok) {
      ++by_status[o.http_status ? std::to_string(o.http_status) : "no answer"];
      if (first_errors.size() < 10) first_errors.push_back({{"i", i}, {"status", o.http_status}, {"error", o.error}});
      continue;
    }
    ++answered;
    prompt_tokens += i < prompt.size() ? prompt[i] : 0;
    hit_live += o.cached_live;
    hit_ram += o.cached_ram;
    hit_disk += o.cached_disk;
    units += o.prefill_units;
    replays += o.encoder_replay_rows > 0;
    snapshot_hits += o.snapshot_hit;
    output_tokens += o.output_tokens;
    ttft.push_back(o.ttft_s);
    latency.push_back(o.latency_s);
  }
  const LiveAgreement a = CompareLive(cedar, out);
  json differing = json::array();
  for (size_t k = 0; k < a.differing.size() && k < 20; ++k) {
    const size_t i = a.differing[k];
    differing.push_back({{"i", i}, {"simulated", cedar[i].hit()}, {"live", out[i].cached_tokens}});
  }
  const int64_t hits = hit_live + hit_ram + hit_disk;
  return {
      {"server",
       {{"address", t.address}, {"model", t.model_name}, {"model_dir", t.model_dir}, {"page_tokens", t.page_tokens},
        {"ram_budget", t.ram_budget}, {"disk_budget", t.disk_budget}, {"restore_policy", t.restore_policy},
        {"decoder_policy", t.decoder_policy}}},
      {"options",
       {{"time_scale", opt.time_scale}, {"concurrency", opt.concurrency}, {"max_tokens", opt.max_tokens},
        {"request_timeout_s", opt.request_timeout_s}}},
      {"requests", out.size()},
      {"answered", answered},
      {"errors", int64_t(out.size()) - answered},
      {"errors_by_status", by_status},
      {"first_errors", first_errors},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"hit_tokens", {{"live", hit_live}, {"ram", hit_ram}, {"disk", hit_disk}, {"total", hits}}},
      {"hit_rate", prompt_tokens ? double(hits) / double(prompt_tokens) : 0.0},
      {"prefill_units", units},
      {"encoder_replays", replays},
      {"snapshot_hits", snapshot_hits},
      {"ttft_s", Spread(ttft)},
      {"latency_s", Spread(latency)},
      {"late_s", Spread(late)},
      {"wall_s", live.wall_s()},
      {"agreement",
       {{"simulated_design", DesignName(Design::kCedar)},
        {"simulated_restore_policy", RestorePolicyName(sim.config().restore)},
        {"compared", a.compared},
        {"equal_hit_tokens", a.equal},
        {"simulated_hit_tokens", a.sim_hit_tokens},
        {"live_hit_tokens", a.live_hit_tokens},
        {"differing", differing}}}};
}

namespace {

void Write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace

std::vector<LiveFigure> WriteLiveData(const std::filesystem::path& dir, const LiveDriver& live, const Simulation& sim) {
  const std::vector<LiveOutcome>& out = live.outcomes();
  const std::vector<Outcome>& cedar = sim.runs()[0].outcomes;
  const bool time = sim.config().cost.has_time();
  // Per request: simulated hit, live hit (answered requests only; "?" is gnuplot's missing value).
  std::string hits = "# request simulated_cedar_hit_tokens live_hit_tokens\n";
  std::vector<double> ttft, est;
  for (size_t i = 0; i < out.size() && i < cedar.size(); ++i) {
    hits += out[i].ok ? fmt::format("{} {} {}\n", i + 1, cedar[i].hit(), out[i].cached_tokens)
                      : fmt::format("{} {} ?\n", i + 1, cedar[i].hit());
    if (out[i].ok) ttft.push_back(out[i].ttft_s);
    if (time) est.push_back(cedar[i].ttft_s);
  }
  Write(dir / "data" / "live_hits.dat", hits);
  std::sort(ttft.begin(), ttft.end());
  std::sort(est.begin(), est.end());
  std::string cdf = "# measured_ttft_s fraction_of_answered_requests\n";
  for (size_t i = 0; i < ttft.size(); ++i) cdf += fmt::format("{:.6g} {:.6f}\n", ttft[i], double(i + 1) / double(ttft.size()));
  Write(dir / "data" / "live_ttft.dat", cdf);

  std::vector<LiveFigure> f;
  f.push_back({"live_hits",
               "Prompt tokens served from the cache per request: the simulated Cedar design (line) and what the "
               "server reported (points, usage.prompt_tokens_details.cached_tokens). Points on the line agree; a "
               "point below it is a hit the server did not find (eviction, concurrency, a failed request before).",
               "set output 'live_hits.png'\nset title 'Hit tokens per request: simulated vs live'\n"
               "set xlabel 'request (arrival order)'\nset ylabel 'hit tokens'\nset key left top\nset yrange [0:*]\n"
               "plot 'data/live_hits.dat' u 1:2 w steps lw 2 lc rgb '#1b7837' t 'simulated (Cedar)', "
               "'' u 1:3 w p pt 7 ps 0.6 lc rgb '#c51b7d' t 'live (cedar serve)'\n"});
  if (ttft.empty()) return f;
  std::string plot = "plot 'data/live_ttft.dat' u 1:2 w steps lw 2 lc rgb '#c51b7d' t 'measured (cedar serve)'";
  if (time) {
    std::string e = "# estimated_ttft_s fraction\n";
    for (size_t i = 0; i < est.size(); ++i) e += fmt::format("{:.6g} {:.6f}\n", est[i], double(i + 1) / double(est.size()));
    Write(dir / "data" / "live_ttft_estimated.dat", e);
    plot += ", 'data/live_ttft_estimated.dat' u 1:2 w steps lw 2 dt 2 lc rgb '#1b7837' t 'estimated (Cedar, cost model)'";
  }
  f.push_back({"live_ttft_cdf",
               "Time to first token the server measured (submit to first token on its engine thread, queueing "
               "included), as a CDF; with a cost model the simulation's estimate for Cedar is dashed.",
               "set output 'live_ttft_cdf.png'\nset title 'Time to first token, live, CDF'\nset xlabel 'TTFT (s)'\n"
               "set ylabel 'share of requests'\nset logscale x\nset yrange [0:1]\nset key below\n" + plot + "\n"});
  return f;
}

std::string LiveHtml(const json& l, std::string (*html)(const std::string&)) {
  const json& s = l["server"];
  const json& a = l["agreement"];
  const json& o = l["options"];
  std::string h = "<h2>Live replay against cedar serve</h2>\n";
  h += fmt::format("<p>Server {} (model {}), pages of {} tokens, RAM {:.4g} GiB, disk {:.4g} GiB, restore policy {}, "
                   "decoder policy {}. Sent with time scale {:g} (0 = back to back), at most {} in flight.</p>\n",
                   html(s["address"].get<std::string>()), html(s["model"].get<std::string>()), s["page_tokens"].get<int64_t>(),
                   s["ram_budget"].get<double>() / double(1ull << 30), s["disk_budget"].get<double>() / double(1ull << 30),
                   html(s["restore_policy"].get<std::string>()), html(s["decoder_policy"].get<std::string>()),
                   o["time_scale"].get<double>(), o["concurrency"].get<int>());
  h += "<table><tr><th></th><th>simulated (Cedar)</th><th>live</th></tr>\n";
  h += fmt::format("<tr><td>hit tokens (answered requests)</td><td>{}</td><td>{}</td></tr>\n",
                   a["simulated_hit_tokens"].get<int64_t>(), a["live_hit_tokens"].get<int64_t>());
  h += fmt::format("<tr><td>requests with equal hit tokens</td><td colspan=2>{} of {}</td></tr>\n",
                   a["equal_hit_tokens"].get<int64_t>(), a["compared"].get<int64_t>());
  h += fmt::format("<tr><td>errors (not answered)</td><td colspan=2>{}</td></tr>\n", l["errors"].get<int64_t>());
  const json& t = l["ttft_s"];
  h += fmt::format("<tr><td>measured TTFT p50 / p90 / p99 (s)</td><td colspan=2>{:.3g} / {:.3g} / {:.3g}</td></tr>\n",
                   t["p50"].get<double>(), t["p90"].get<double>(), t["p99"].get<double>());
  h += fmt::format("<tr><td>measured prefill units</td><td colspan=2>{}</td></tr>\n</table>\n",
                   l["prefill_units"].get<int64_t>());
  if (!l["first_errors"].empty()) {
    h += "<p>First errors:</p><ul>\n";
    for (const json& e : l["first_errors"]) {
      h += fmt::format("<li>request {}: HTTP {}: {}</li>\n", e["i"].get<int64_t>(), e["status"].get<int>(),
                       html(e["error"].get<std::string>()));
    }
    h += "</ul>\n";
  }
  return h;
}

std::string LiveSummary(const json& l) {
  const json& a = l["agreement"];
  const json& t = l["ttft_s"];
  return fmt::format(
      "live ({}): {} of {} requests answered ({} errors); hit rate {:.3f}; measured TTFT p50 {:.3g} s, p99 {:.3g} s\n"
      "agreement with simulated Cedar ({}): {} of {} requests equal; hit tokens simulated {} vs live {}\n",
      l["server"]["address"].get<std::string>(), l["answered"].get<int64_t>(), l["requests"].get<int64_t>(),
      l["errors"].get<int64_t>(), l["hit_rate"].get<double>(), t["p50"].get<double>(), t["p99"].get<double>(),
      a["simulated_restore_policy"].get<std::string>(), a["equal_hit_tokens"].get<int64_t>(),
      a["compared"].get<int64_t>(), a["simulated_hit_tokens"].get<int64_t>(), a["live_hit_tokens"].get<int64_t>());
}

}  // namespace cedar::profile
