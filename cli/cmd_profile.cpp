// cedar profile: prefix-cache hit rates and prefill compute on agent traces (docs/PROFILE.md).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "engine/config.h"
#include "profile/profile.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "server/profile_live/live_driver.h"
#include "server/http_server.h"

namespace cedar::cli {

namespace {

constexpr const char* kUsage =
    "usage: cedar profile --trace FILE|DIR [FILE|DIR ...] [--preset flash|small | --model DIR]\n"
    "                     [--arrival recorded|poisson:R|concurrency:N] [--seed S] [--kv-dtype auto|f32|bf16|fp8|released]\n"
    "                     [--cache-ram 16G] [--cache-disk 0] [--cache-dir DIR] [--sweep-ram auto|1G,4G,16G]\n"
    "                     [--calibrate | --units-per-s X] [--out DIR] [--strict] [--progress auto|on|off]\n"
    "                     [--servers N [--routing session|random] [--cache-remote-ram SIZE]]\n"
    "       cedar profile --live [--socket PATH | --url http://HOST:PORT] [--time-scale 0] [--concurrency 1] --trace ...\n\n"
    "Replays agent traces (claude-code JSON, mooncake JSONL) through the real prefix cache with payloads\n"
    "sized for the model, and compares Cedar with a decoder-only model (LRU block cache, and no cache)\n"
    "and the CED model without cache. Writes DIR/index.html, report.json and plots.\n"
    "Arrivals (--arrival, default recorded: every trace file starts at t = 0, all conversations at once):\n"
    "poisson:R starts R conversations per minute, concurrency:N keeps N active; see docs/PROFILE.md.\n"
    "With --live the same requests also go to a running `cedar serve`, the simulation takes the server's\n"
    "model, page size, budgets and restore policy, and the report puts measured hits and TTFT next to it.";

std::vector<std::string> ParseListItems(const std::string& s) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) items.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::string JoinArgs(int argc, char** argv) {
  std::string s = "cedar";
  for (int i = 0; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

}  // namespace

int RunProfile(int argc, char** argv) {
  profile::ProfileOptions o;
  std::vector<std::string> traces;
  std::string format = "auto", sweep, restore = "staircase", progress = "auto";
  std::vector<std::string> stray;
  profile_live::ServerAddress server;
  std::string socket, url;
  profile::LiveOptions live;
  po::options_description desc("cedar profile");
  desc.add_options()("help,h", "show this help")(
      "trace", po::value(&traces)->multitoken()->composing(), "trace files or directories (several after one --trace, "
      "or repeated; all are read)")(
      "arrival", po::value(&o.arrival)->default_value("recorded"),
      "when conversations start: recorded (default: every file at t = 0) | poisson:R (R new conversations per "
      "minute, seeded by --seed) | concurrency:N (at most N active; the next starts when one ends)")(
      "kv-dtype", po::value(&o.kv_dtype)->default_value("auto"),
      "Cedar's stored KV precision: f32 | bf16 | fp8 | released (FP4 global KV, MXFP4 index keys, FP8 windows: "
      "890 B/token on flash); auto = released for the flash preset or a released model, else f32")(
      "baseline-kv-dtype", po::value(&o.baseline_kv_dtype)->default_value("auto"),
      "the decoder-only baseline's KV precision: f32 | bf16 | fp8 | released; auto = fp8 (E4M3 with UE8M0 "
      "scales per 32, as vLLM's --kv-cache-dtype fp8) unless Cedar's is f32")(
      "format", po::value(&format)->default_value("auto"), "auto | claude-code | mooncake")(
      "strict", po::bool_switch(&o.strict), "stop at the first malformed trace entry (default: report and skip)")(
      "model", po::value(&o.model_dir), "model directory (config.json; its weights are used by --calibrate)")(
      "preset", po::value(&o.preset)->default_value("flash"), ("a CED preset (" + JoinNames(PresetNames(), " | ") + "), when no --model").c_str())(
      "cache-ram", BytesOption("--cache-ram", &o.cache_ram, "16G"), "RAM budget of each cache")(
      "cache-disk", BytesOption("--cache-disk", &o.cache_disk, "0"), "disk budget of each cache (0 = no disk tier)")(
      "cache-dir", po::value(&o.cache_dir), "parent folder for the simulated disk tiers (default: a temp folder)")(
      "sweep-ram", po::value(&sweep), "more RAM budgets to compare, e.g. 1G,4G,16G,64G, or auto: 8 powers of two "
      "up to where Cedar reaches the ideal")(
      "page-tokens", IntOption<size_t>("--page-tokens", &o.page_tokens, 1, 1 << 16), "Cedar's page size in tokens")(
      "block-tokens", IntOption<size_t>("--block-tokens", &o.block_tokens, 1, 1 << 16), "the decoder-only baseline's block size")(
      "calibrate", po::bool_switch(&o.calibrate), "measure layer-token units/s with the engine (small preset or --model)")(
      "calibrate-seconds", RealOption("--calibrate-seconds", &o.calibrate_seconds, 0.0, 3600.0, true), "length of the calibration run")(
      "units-per-s", RealOption("--units-per-s", &o.units_per_s, 0.0, 1e18), "layer-token units per second (e.g. measured on a GPU)")(
      "disk-gbs", RealOption("--disk-gbs", &o.disk_gbs, 0.0, 1e6, true), "disk-tier read rate in GB/s, for TTFT")(
      "seed", IntOption<uint64_t>("--seed", &o.seed, 0, UINT64_MAX),
      "seed of the block-id -> tokens generator and of --arrival poisson")(
      "payload-scale", IntOption<uint64_t>("--payload-scale", &o.payload_scale, 1, 1 << 20),
      "divide payloads and budgets by K so a disk tier writes 1/K of the bytes (see docs/PROFILE.md)")(
      "threads", IntOption("--threads", &o.threads, 0, 4096), "worker threads for the simulated caches (0 = one per core)")(
      "out", po::value(&o.out)->default_value("out/profile"), "report folder")(
      "no-plots", "write plot data and scripts but do not run gnuplot")(
      "progress", po::value(&progress)->default_value("auto")->implicit_value("on"),
      "progress bar: auto (when stderr is a terminal) | on | off")(
      "no-progress", "never show the progress bar (--progress off)")(
      "restore-policy", po::value(&restore)->default_value("staircase"),
      "Cedar's simulated restore: staircase | replay | recompute | optimistic (docs/PROFILE.md; --live takes the "
      "server's)")(
      "limit", IntOption<size_t>("--limit", &o.limit, 0, SIZE_MAX),
      "stop reading after N requests, files in path order (0 = all)");
  po::options_description cluster_desc("several servers (--servers)");
  cluster_desc.add_options()("servers", OptionalIntOption("--servers", &o.servers, 1, 4096),
                             "also simulate N servers, each with --cache-ram (and --cache-disk) of its own, over one "
                             "shared tier; reports hit rates per tier (docs/PROFILE.md)")(
      "routing", po::value(&o.routing)->default_value("session"),
      "session (a consistent hash of the session id, as HAProxy's balance hdr(X-Session-Id)) | random")(
      "cache-remote-ram", BytesOption("--cache-remote-ram", &o.cache_remote_ram, "0"),
      "the shared tier's size (cedar serve --cache-remote: Redis's maxmemory, LRU); 0 = no shared tier");
  desc.add(cluster_desc);
  po::options_description live_desc("live mode (--live)");
  live_desc.add_options()("live", po::bool_switch(&o.live), "also replay against a running `cedar serve`")(
      "socket", po::value(&socket), ("the server's Unix socket (default " + server::DefaultSocketPath() + ")").c_str())(
      "url", po::value(&url), "the server over TCP instead, http://HOST:PORT")(
      "api-key", po::value(&server.api_key), "TCP: the server's --api-key (or env CEDAR_API_KEY)")(
      "time-scale", RealOption("--time-scale", &live.time_scale, 0.0, 1e6),
      "send each request at (t - t0) * X seconds; 1 = the trace's timing, 0 = back to back")(
      "concurrency", IntOption("--concurrency", &live.concurrency, 1, 4096), "requests in flight at most")(
      "live-max-tokens", IntOption<int64_t>("--live-max-tokens", &live.max_tokens, -1, 1 << 24),
      "cap on each request's output tokens (-1 = the trace's count)")(
      "request-timeout", RealOption("--request-timeout", &live.request_timeout_s, 0.0, 1e6, true), "seconds one request may take");
  desc.add(live_desc);
  // Words that no flag takes land here and are refused (never silently ignored).
  po::options_description hidden;
  hidden.add_options()("stray", po::value(&stray));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("stray", -1);
  po::variables_map vm;
  CheckFlags([&] { po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm); });
  if (vm.count("help")) {
    std::cout << kUsage << "\n\n" << desc << "\n";
    return 0;
  }
  CheckFlags([&] { po::notify(vm); });
  if (!stray.empty()) {
    std::string list;
    for (const std::string& w : stray) list += (list.empty() ? "'" : ", '") + w + "'";
    throw UsageError("unexpected argument" + std::string(stray.size() > 1 ? "s " : " ") + list +
                     " (no flag takes " + std::string(stray.size() > 1 ? "them" : "it") +
                     "; options start with --, see cedar profile --help)");
  }
  o.traces = traces;
  if (!profile::ParseFormat(format, &o.format)) {
    throw UsageError("--format: expected auto, claude-code or mooncake, found " + format);
  }
  for (const std::string& item : ParseListItems(sweep)) {
    if (item == "auto") o.sweep_auto = true;
    else o.sweep_ram.push_back(CheckFlags([&] { return ParseBytesOption("--sweep-ram", item, 1, kMaxBytesOption); }));
  }
  o.plots = vm.count("no-plots") == 0;
  if (!profile::ParseRestorePolicy(restore, &o.restore)) {
    throw UsageError("--restore-policy: expected staircase, replay, recompute or optimistic, found " + restore);
  }
  if (o.live) {
    if (!socket.empty() && !url.empty()) throw UsageError("give --socket or --url, not both");
    server.address = !url.empty() ? url : !socket.empty() ? "unix:" + socket : "unix:" + server::DefaultSocketPath();
    if (server.api_key.empty()) {
      if (const char* k = std::getenv("CEDAR_API_KEY")) server.api_key = k;
    }
    o.live_driver = [server, live](std::ostream& log) { return profile_live::ConnectLiveDriver(server, live, log); };
  } else if (!socket.empty() || !url.empty()) {
    throw UsageError("--socket and --url need --live");
  }
  if (progress == "on") o.progress = 1;
  else if (progress == "off") o.progress = 0;
  else if (progress != "auto") throw UsageError("--progress: expected auto, on or off, found '" + progress + "'");
  if (vm.count("no-progress")) o.progress = 0;
  o.command_line = JoinArgs(argc, argv);
  CheckFlags([&] { profile::CheckOptions(o); });
  const profile::ProfileResult r = profile::RunProfile(o, std::cerr);
  std::cout << profile::SummaryTable(r.report);
  return 0;
}

}  // namespace cedar::cli
