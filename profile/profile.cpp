#include "profile/profile.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "cache/byte_size.h"
#include "profile/arrival.h"
#include "profile/cluster.h"
#include "profile/cost.h"
#include "profile/ideal.h"
#include "profile/progress.h"
#include "profile/simulator.h"
#include "profile/synth.h"

namespace cedar::profile {

namespace fs = std::filesystem;

uint64_t ParseBytes(const std::string& s) { return cache::ParseByteSize(s); }

std::vector<uint64_t> ParseBytesList(const std::string& s) {
  std::vector<uint64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) v.push_back(ParseBytes(item));
  }
  return v;
}

std::string FormatBytes(uint64_t b) {
  const char* units[] = {"", "K", "M", "G", "T"};
  double v = double(b);
  int k = 0;
  while (v >= 1024 && k < 4) {
    v /= 1024;
    ++k;
  }
  return fmt::format("{:g}{}", std::round(v * 100) / 100, units[k]);
}

KvPrecision ResolveKvPrecision(const ProfileOptions& o, const ModelConfig& model, const std::string& model_name) {
  KvPrecision kv;
  if (o.kv_dtype == "auto") {
    kv.cedar = model_name == "preset flash" || model.kv_dtype == "released" ? KvDtype::kReleased : KvDtype::kF32;
  } else if (!ParseKvDtype(o.kv_dtype, &kv.cedar)) {
    throw std::invalid_argument("--kv-dtype: expected auto, f32, bf16, fp8 or released, found '" + o.kv_dtype + "'");
  }
  if (o.baseline_kv_dtype == "auto") {
    kv.decoder_only = kv.cedar == KvDtype::kF32 ? KvDtype::kF32 : KvDtype::kFp8;
  } else if (!ParseKvDtype(o.baseline_kv_dtype, &kv.decoder_only)) {
    throw std::invalid_argument("--baseline-kv-dtype: expected auto, f32, bf16, fp8 or released, found '" +
                                o.baseline_kv_dtype + "'");
  }
  return kv;
}

std::vector<uint64_t> AutoSweepBudgets(uint64_t ideal_bytes) {
  uint64_t top = 1ull << 20;  // at least 1 MiB
  while (top < ideal_bytes && top < (1ull << 50)) top <<= 1;
  std::vector<uint64_t> v;
  for (int k = 7; k >= 0; --k) v.push_back(std::max<uint64_t>(1, top >> k));
  return v;
}

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void CheckOptions(const ProfileOptions& o) {
  if (o.live && !o.live_driver) {
    throw std::invalid_argument("--live needs a driver that reaches the server (the cedar binary provides it)");
  }
  if (o.traces.empty()) throw std::invalid_argument("give at least one --trace FILE|DIR");
  if (o.calibrate && o.units_per_s > 0) throw std::invalid_argument("give --calibrate or --units-per-s, not both");
  if (o.units_per_s < 0) throw std::invalid_argument("--units-per-s must be > 0");
  if (!(o.disk_gbs > 0)) throw std::invalid_argument("--disk-gbs must be > 0");
  if (o.servers < 0) throw std::invalid_argument("--servers must be >= 1");
  Routing routing;
  if (!ParseRouting(o.routing, &routing)) throw std::invalid_argument("--routing: expected session or random, found '" + o.routing + "'");
  if (o.servers == 0 && (o.cache_remote_ram > 0 || o.routing != "session")) {
    throw std::invalid_argument("--routing and --cache-remote-ram describe a cluster: give --servers N too");
  }
  if (o.cache_ram == 0) throw std::invalid_argument("--cache-ram must be > 0");
  if (o.payload_scale == 0) throw std::invalid_argument("--payload-scale must be >= 1");
  for (size_t p : {o.page_tokens, o.block_tokens}) {
    if (p < 2 || (p & (p - 1)) != 0) throw std::invalid_argument("page and block sizes must be powers of two >= 2");
  }
  ParseArrival(o.arrival, o.seed);  // throws naming a bad value, before any trace is read
  KvDtype d;
  if (o.kv_dtype != "auto" && !ParseKvDtype(o.kv_dtype, &d)) {
    throw std::invalid_argument("--kv-dtype: expected auto, f32, bf16, fp8 or released, found '" + o.kv_dtype + "'");
  }
  if (o.baseline_kv_dtype != "auto" && !ParseKvDtype(o.baseline_kv_dtype, &d)) {
    throw std::invalid_argument("--baseline-kv-dtype: expected auto, f32, bf16, fp8 or released, found '" +
                                o.baseline_kv_dtype + "'");
  }
  ModelConfig c;
  if (o.model_dir.empty() && !o.live && !PresetConfig(o.preset, &c)) {
    throw std::invalid_argument(UnknownPresetMessage(o.preset));
  }
}

namespace {

// The model whose state sizes and unit formulas the simulation uses, and its name. Live: the
// served model (its config.json where the server says it loaded it, unless --model is given),
// which must agree with the server on everything the tokens and the units depend on.
std::pair<ModelConfig, std::string> ResolveModel(const ProfileOptions& o, const LiveTarget* live) {
  if (live) {
    std::string dir = o.model_dir;
    if (dir.empty()) {
      if (live->model_dir.empty() || !fs::exists(fs::path(live->model_dir) / "config.json")) {
        throw std::runtime_error("the server at " + live->address + " serves a model whose config.json is not readable "
                                 "here ('" + live->model_dir + "'); pass --model DIR (the served model's folder)");
      }
      dir = live->model_dir;
    }
    const ModelConfig c = LoadConfigFile(dir + "/config.json");
    if (c.vocab_size != live->vocab_size || c.n_layers != live->n_layers ||
        c.n_encoder_layers != live->n_encoder_layers || c.window != live->window) {
      throw std::runtime_error(fmt::format(
          "--model {} (vocab {}, L {}, E {}, W {}) is not the model the server at {} serves (vocab {}, L {}, E {}, W {})",
          dir, c.vocab_size, c.n_layers, c.n_encoder_layers, c.window, live->address, live->vocab_size, live->n_layers,
          live->n_encoder_layers, live->window));
    }
    return {c, dir};
  }
  if (!o.model_dir.empty()) return {LoadConfigFile(o.model_dir + "/config.json"), o.model_dir};
  ModelConfig c;
  if (!PresetConfig(o.preset, &c)) throw std::invalid_argument(UnknownPresetMessage(o.preset));
  return {c, "preset " + o.preset};
}

CostModel MakeCostModel(const ProfileOptions& o, const ModelConfig& model, std::ostream& log) {
  CostModel cm;
  if (o.units_per_s > 0) {
    cm.units_per_s = o.units_per_s;
    cm.source = "--units-per-s";
    cm.note = fmt::format("{:.4g} layer-token units/s, given with --units-per-s.", o.units_per_s);
  } else if (o.calibrate) {
    log << "calibrating: running the engine for " << o.calibrate_seconds << " s ...\n" << std::flush;
    cm = Calibrate(model, o.model_dir, o.calibrate_seconds);
  }
  cm.disk_bytes_per_s = o.disk_gbs * 1e9;
  if (cm.has_time()) cm.note += fmt::format(" Disk-tier hits are read back at {:g} GB/s (--disk-gbs).", o.disk_gbs);
  return cm;
}

// Feeds every request to the simulation, the cluster and the live server (one synthesis, one
// order); the last two are optional.
class TeeDriver : public ReplayDriver {
 public:
  TeeDriver(Simulation& sim, ClusterSim* cluster, LiveDriver* live) : sim_(sim), cluster_(cluster), live_(live) {}
  void Submit(const ReplayRequest& r) override {
    sim_.Submit(r);                     // queues and returns
    if (cluster_) cluster_->Submit(r);  // runs here, beside the simulation's workers
    if (live_) live_->Submit(r);        // may wait for the request's time or a free slot
  }
  void Finish() override {
    if (live_) live_->Finish();
    sim_.Finish();
  }

 private:
  Simulation& sim_;
  ClusterSim* cluster_;
  LiveDriver* live_;
};

// Runs the simulation (and the live replay, when `live`) with the disk tiers under
// cfg.disk_dir or a temporary folder (removed afterwards).
ProfileResult Simulate(const ProfileOptions& o, const Trace& trace, SimConfig cfg, ReportInput in, LiveDriver* live,
                       std::ostream& log) {
  // The ideal first: --sweep-ram auto takes its budgets from the ideal working set.
  const auto t_ideal = std::chrono::steady_clock::now();
  IdealDriver ideal(cfg);
  Replay(trace, TokenSynth(o.seed, cfg.model.vocab_size), ideal);
  in.ideal = &ideal;
  log << fmt::format("ideal (a cache that never evicts): computed in {:.2f} s; it would hold {} for Cedar, {} for the "
                     "decoder-only baseline\n",
                     Since(t_ideal), FormatBudget(ideal.cedar_bytes()), FormatBudget(ideal.decoder_only_bytes()));
  if (o.sweep_auto) {
    for (uint64_t b : AutoSweepBudgets(ideal.cedar_bytes())) cfg.sweep_ram.push_back(b);
    std::string list;
    for (uint64_t b : AutoSweepBudgets(ideal.cedar_bytes())) list += (list.empty() ? "" : ", ") + FormatBudget(b);
    log << "--sweep-ram auto: " << list << "\n";
  }
  std::string temp_dir;
  if (cfg.disk_budget > 0 && cfg.disk_dir.empty()) {
    temp_dir = (fs::temp_directory_path() / fmt::format("cedar-profile-{}", getpid())).string();
    cfg.disk_dir = temp_dir;
  }
  if (!cfg.disk_dir.empty()) fs::create_directories(cfg.disk_dir);
  if (cfg.disk_budget > 0) {
    log << fmt::format("disk tier: pages and snapshots that leave RAM are written to LMDB under {} with 1/{} of their "
                       "real size (--payload-scale); with a large model this is most of the run time\n",
                       cfg.disk_dir, cfg.payload_scale);
  }
  ProfileResult result;
  {
    const auto t0 = std::chrono::steady_clock::now();
    Simulation sim(cfg);
    std::unique_ptr<ClusterSim> cluster;
    if (o.servers > 0) {
      ClusterConfig cc;
      cc.servers = o.servers;
      ParseRouting(o.routing, &cc.routing);  // checked in CheckOptions
      cc.shared_ram = o.cache_remote_ram;
      cc.seed = o.seed;
      cluster = std::make_unique<ClusterSim>(cfg, cc);
      log << fmt::format("cluster: {} servers with {} of RAM{} each, {} routing, shared tier {}\n", cc.servers,
                         FormatBytes(cfg.ram_budget), cfg.disk_budget ? " and " + FormatBytes(cfg.disk_budget) + " of disk" : "",
                         RoutingName(cc.routing), cc.shared_ram ? FormatBytes(cc.shared_ram) : "none");
    }
    const bool show = o.progress == 1 || (o.progress == -1 && Progress::StderrIsTty());
    Progress bar(trace.requests.size(), show, live ? "requests sent" : "requests");
    const TokenSynth synth(o.seed, cfg.model.vocab_size);
    TeeDriver tee(sim, cluster.get(), live);
    Replay(trace, synth, tee, [&](size_t done) { bar.Update(done); });
    bar.Done();
    result.simulate_s = Since(t0);
    in.sim = &sim;
    in.simulate_s = result.simulate_s;
    in.live = live;
    in.cluster = cluster.get();
    result.report = BuildReportJson(in);
    if (!o.out.empty()) result.files = WriteReport(o.out, result.report, in, o.plots);
  }
  if (!temp_dir.empty()) fs::remove_all(temp_dir);
  if (live) {
    size_t answered = 0;
    for (const LiveOutcome& lo : live->outcomes()) answered += lo.ok;
    if (answered == 0 && !live->outcomes().empty()) {
      const LiveOutcome& first = live->outcomes().front();
      throw std::runtime_error(fmt::format(
          "live: the server refused all {} requests (first: HTTP {}: {}); the report in {} holds the simulation only",
          live->outcomes().size(), first.http_status, first.error, o.out));
    }
  }
  log << fmt::format("{} {} requests in {:.2f} s\n", live ? "replayed (live and simulated)" : "simulated",
                     trace.requests.size(), result.simulate_s);
  return result;
}

// Live: the simulated caches take the server's page size, budgets and restore policy.
void ConfigureLikeServer(const LiveTarget& t, SimConfig* cfg, std::ostream& log) {
  if (t.page_tokens > 0) cfg->page_tokens = t.page_tokens;
  cfg->ram_budget = t.ram_budget;
  cfg->disk_budget = t.disk_budget;
  // The server restores exactly (at the deepest snapshot) under restore=recompute, and also
  // under decoder=exact (session/turns.cpp, Restore).
  if (t.restore_policy == "recompute") cfg->restore = RestorePolicy::kRecompute;
  else if (t.restore_policy == "replay") cfg->restore = t.decoder_policy == "exact" ? RestorePolicy::kRecompute : RestorePolicy::kReplay;
  else cfg->restore = RestorePolicy::kStaircase;
  // The decoder policy decides which decoder tails exact repeats resume from.
  if (!t.decoder_policy.empty() && !ParseSimDecoder(t.decoder_policy, &cfg->decoder))
    throw std::runtime_error("live: the server reports decoder policy '" + t.decoder_policy +
                             "'; expected auto, exact or bounded");
  log << fmt::format("live: {} serves {} (vocab {}, max_seq_len {}); simulating with its cache: pages of {} tokens, RAM "
                     "{}, disk {}, restore policy {} (decoder {})\n",
                     t.address, t.model_name, t.vocab_size, t.max_seq_len, cfg->page_tokens,
                     FormatBytes(cfg->ram_budget), FormatBytes(cfg->disk_budget), RestorePolicyName(cfg->restore),
                     t.decoder_policy.empty() ? "?" : t.decoder_policy);
}

}  // namespace

ProfileResult RunProfile(const ProfileOptions& o, std::ostream& log) {
  CheckOptions(o);
  // Live: reach the server first, so a wrong address fails before the traces are read.
  std::unique_ptr<LiveDriver> live = o.live ? o.live_driver(log) : nullptr;
  auto [model, model_name] = ResolveModel(o, live ? &live->target() : nullptr);

  const auto t_load = std::chrono::steady_clock::now();
  Trace trace = LoadTraces(o.traces, LoadOptions{o.format, o.strict, o.limit});
  const double load_s = Since(t_load);
  for (const TraceIssue& is : trace.issues) log << "skipped malformed entry: " << is.where << ": " << is.what << "\n";
  log << fmt::format("read {} requests from {} file(s) in {:.2f} s ({} malformed entries skipped)\n",
                     trace.requests.size(), trace.files.size(), load_s, trace.issues.size());
  if (o.limit > 0 && trace.requests.size() >= o.limit) {
    log << fmt::format("--limit: stopped reading after {} requests (files in path order)\n", o.limit);
  }
  // Live: the server answers with at most --live-max-tokens tokens, so the simulation caches no
  // more (else the two disagree once the caches evict).
  const int64_t max_output = live ? live->options().max_tokens : o.max_output_tokens;
  if (max_output >= 0) {
    for (TraceRequest& r : trace.requests) r.output_tokens = std::min(r.output_tokens, max_output);
  }
  const ArrivalModel arrival = ParseArrival(o.arrival, o.seed);
  const std::vector<ConversationSpan> spans = ApplyArrival(arrival, &trace);
  log << fmt::format("arrival {}: {} conversations, the last starting at {:.0f} s\n", ArrivalName(arrival), spans.size(),
                     spans.empty() ? 0.0 : spans.back().start);
  if (live && live->target().max_seq_len > 0 && !trace.requests.empty()) {
    size_t too_long = 0;
    for (const TraceRequest& r : trace.requests) too_long += r.input_tokens >= live->target().max_seq_len;
    if (too_long == trace.requests.size()) {
      throw std::runtime_error(fmt::format(
          "live: every one of the {} requests has a prompt of at least the server's max_seq_len ({} tokens), so the "
          "server would refuse them all; serve a model with a longer max_seq_len or pick shorter traces",
          too_long, live->target().max_seq_len));
    }
    if (too_long > 0) {
      log << fmt::format("live: {} of {} requests have prompts of at least the server's max_seq_len ({}); the server "
                         "will refuse them\n", too_long, trace.requests.size(), live->target().max_seq_len);
    }
  }

  const auto t_cal = std::chrono::steady_clock::now();
  SimConfig cfg;
  cfg.model = model;
  cfg.page_tokens = o.page_tokens;
  cfg.block_tokens = o.block_tokens;
  cfg.ram_budget = o.cache_ram;
  cfg.disk_budget = o.cache_disk;
  cfg.disk_dir = o.cache_dir;
  cfg.sweep_ram = o.sweep_ram;
  cfg.threads = o.threads;
  cfg.payload_scale = o.payload_scale;
  cfg.restore = o.restore;
  cfg.kv = ResolveKvPrecision(o, model, model_name);
  if (live) ConfigureLikeServer(live->target(), &cfg, log);
  cfg.cost = MakeCostModel(o, model, log);
  const double calibrate_s = o.calibrate ? Since(t_cal) : 0.0;
  if (cfg.cost.has_time()) log << "cost model: " << cfg.cost.note << "\n";

  ReportInput in;
  in.trace = &trace;
  in.model_name = model_name;
  in.command_line = o.command_line;
  in.load_s = load_s;
  in.calibrate_s = calibrate_s;
  in.arrival = ArrivalName(arrival);
  in.spans = &spans;
  in.sweep_auto = o.sweep_auto;
  ProfileResult result = Simulate(o, trace, cfg, in, live.get(), log);
  if (!o.out.empty()) {
    log << "report: " << result.files.html_path << "\n";
    if (!result.files.plot_note.empty()) log << "note: " << result.files.plot_note << "\n";
  }
  return result;
}

}  // namespace cedar::profile
