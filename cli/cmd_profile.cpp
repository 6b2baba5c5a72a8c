// cedar profile: prefix-cache hit rates and prefill compute on agent traces (docs/PROFILE.md).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "profile/profile.h"
#include "cli/commands.h"
#include "server/profile_live/live_driver.h"
#include "server/http_server.h"

namespace po = boost::program_options;

namespace cedar::cli {

namespace {

constexpr const char* kUsage =
    "usage: cedar profile --trace FILE|DIR [--trace ...] [--preset flash|small | --model DIR]\n"
    "                     [--cache-ram 16G] [--cache-disk 0] [--cache-dir DIR] [--sweep-ram 1G,4G,16G]\n"
    "                     [--calibrate | --units-per-s X] [--out DIR] [--strict] [--progress]\n"
    "       cedar profile --live [--socket PATH | --url http://HOST:PORT] [--time-scale 0] [--concurrency 1] --trace ...\n\n"
    "Replays agent traces (claude-code JSON, mooncake JSONL) through the real prefix cache with payloads\n"
    "sized for the model, and compares Cedar with a decoder-only model (LRU block cache, and no cache)\n"
    "and the CED model without cache. Writes DIR/index.html, report.json and plots.\n"
    "With --live the same requests also go to a running `cedar serve`, the simulation takes the server's\n"
    "model, page size, budgets and restore policy, and the report puts measured hits and TTFT next to it.";

std::string JoinArgs(int argc, char** argv) {
  std::string s = "cedar";
  for (int i = 0; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

}  // namespace

int RunProfile(int argc, char** argv) {
  profile::ProfileOptions o;
  std::vector<std::string> traces;
  std::string format = "auto", ram = "16G", disk = "0", sweep, restore = "staircase";
  profile_live::ServerAddress server;
  std::string socket, url;
  profile::LiveOptions live;
  po::options_description desc("cedar profile");
  desc.add_options()("help,h", "show this help")(
      "trace", po::value(&traces)->composing(), "trace file or directory (repeatable)")(
      "format", po::value(&format)->default_value("auto"), "auto | claude-code | mooncake")(
      "strict", po::bool_switch(&o.strict), "stop at the first malformed trace entry (default: report and skip)")(
      "model", po::value(&o.model_dir), "model directory (config.json; its weights are used by --calibrate)")(
      "preset", po::value(&o.preset)->default_value("flash"), "tiny | small | flash, when no --model")(
      "cache-ram", po::value(&ram)->default_value("16G"), "RAM budget of each cache")(
      "cache-disk", po::value(&disk)->default_value("0"), "disk budget of each cache (0 = no disk tier)")(
      "cache-dir", po::value(&o.cache_dir), "parent folder for the simulated disk tiers (default: a temp folder)")(
      "sweep-ram", po::value(&sweep), "more RAM budgets to compare, e.g. 1G,4G,16G,64G")(
      "page-tokens", po::value(&o.page_tokens)->default_value(16), "Cedar's page size in tokens")(
      "block-tokens", po::value(&o.block_tokens)->default_value(16), "the decoder-only baseline's block size")(
      "calibrate", po::bool_switch(&o.calibrate), "measure layer-token units/s with the engine (small preset or --model)")(
      "calibrate-seconds", po::value(&o.calibrate_seconds)->default_value(2.0), "length of the calibration run")(
      "units-per-s", po::value(&o.units_per_s), "layer-token units per second (e.g. measured on a GPU)")(
      "disk-gbs", po::value(&o.disk_gbs)->default_value(2.0), "disk-tier read rate in GB/s, for TTFT")(
      "seed", po::value(&o.seed)->default_value(0), "seed of the block-id -> tokens generator")(
      "payload-scale", po::value(&o.payload_scale)->default_value(1),
      "divide payloads and budgets by K so a disk tier writes 1/K of the bytes (see docs/PROFILE.md)")(
      "threads", po::value(&o.threads)->default_value(0), "worker threads for the simulated caches (0 = one per core)")(
      "out", po::value(&o.out)->default_value("out/profile"), "report folder")(
      "no-plots", "write plot data and scripts but do not run gnuplot")(
      "progress", "show the progress bar even when stderr is not a terminal")(
      "no-progress", "never show the progress bar")(
      "restore-policy", po::value(&restore)->default_value("staircase"),
      "Cedar's simulated restore: staircase | replay | recompute | optimistic (docs/PROFILE.md; --live takes the "
      "server's)")(
      "limit", po::value(&o.limit)->default_value(0), "replay only the first N requests (0 = all)");
  po::options_description live_desc("live mode (--live)");
  live_desc.add_options()("live", po::bool_switch(&o.live), "also replay against a running `cedar serve`")(
      "socket", po::value(&socket), ("the server's Unix socket (default " + server::DefaultSocketPath() + ")").c_str())(
      "url", po::value(&url), "the server over TCP instead, http://HOST:PORT")(
      "api-key", po::value(&server.api_key), "TCP: the server's --api-key (or env CEDAR_API_KEY)")(
      "time-scale", po::value(&live.time_scale)->default_value(0),
      "send each request at (t - t0) * X seconds; 1 = the trace's timing, 0 = back to back")(
      "concurrency", po::value(&live.concurrency)->default_value(1), "requests in flight at most")(
      "live-max-tokens", po::value(&live.max_tokens)->default_value(-1),
      "cap on each request's output tokens (-1 = the trace's count)")(
      "request-timeout", po::value(&live.request_timeout_s)->default_value(600), "seconds one request may take");
  desc.add(live_desc);
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << kUsage << "\n\n" << desc << "\n";
    return 0;
  }
  po::notify(vm);
  o.traces = traces;
  if (!profile::ParseFormat(format, &o.format)) {
    throw std::invalid_argument("--format: expected auto, claude-code or mooncake, found " + format);
  }
  o.cache_ram = profile::ParseBytes(ram);
  o.cache_disk = profile::ParseBytes(disk);
  o.sweep_ram = profile::ParseBytesList(sweep);
  o.plots = vm.count("no-plots") == 0;
  if (!profile::ParseRestorePolicy(restore, &o.restore)) {
    throw std::invalid_argument("--restore-policy: expected staircase, replay, recompute or optimistic, found " + restore);
  }
  if (o.live) {
    if (!socket.empty() && !url.empty()) throw std::invalid_argument("give --socket or --url, not both");
    server.address = !url.empty() ? url : !socket.empty() ? "unix:" + socket : "unix:" + server::DefaultSocketPath();
    if (server.api_key.empty()) {
      if (const char* k = std::getenv("CEDAR_API_KEY")) server.api_key = k;
    }
    o.live_driver = [server, live](std::ostream& log) { return profile_live::ConnectLiveDriver(server, live, log); };
  } else if (!socket.empty() || !url.empty()) {
    throw std::invalid_argument("--socket and --url need --live");
  }
  if (vm.count("progress")) o.progress = 1;
  if (vm.count("no-progress")) o.progress = 0;
  o.command_line = JoinArgs(argc, argv);
  const profile::ProfileResult r = profile::RunProfile(o, std::cerr);
  std::cout << profile::SummaryTable(r.report);
  return 0;
}

}  // namespace cedar::cli
