// cedar serve: the HTTP API (docs/SERVER.md) on a Unix socket and optionally TCP.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/activation_modes.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"
#include "session/session_manager.h"
#include "cli/commands.h"
#include "cache/remote_config.h"
#include "cli/flags.h"
#include "tools_bridge/lib/chat_format.h"
#include "tools_bridge/lib/model_tokenizer.h"
#include "server/api.h"
#include "server/http_server.h"
#include "server/tenant.h"

namespace cedar::cli {
namespace {

// Budgets the machine cannot hold are refused before anything loads: the RAM tier beyond the
// machine's memory, the disk tier beyond the file system holding --cache-dir (LMDB would fail
// to map it with a bare "Cannot allocate memory", or fill the disk).
void CheckCacheBudgets(uint64_t ram, uint64_t disk, const std::string& cache_dir, const po::variables_map& vm) {
  auto as_given = [&](const char* name, uint64_t bytes) {
    if (!vm.count(name)) return "the default " + std::to_string(bytes) + " bytes";
    return "'" + vm[name].as<std::string>() + "' (" + std::to_string(bytes) + " bytes)";
  };
  const int64_t memory = kernels::PhysicalMemoryBytes();
  if (memory > 0 && ram > uint64_t(memory)) {
    throw UsageError("--cache-ram: " + as_given("cache-ram", ram) + " is more than this machine's memory; expected 0.." +
                     std::to_string(memory) + " bytes");
  }
  if (cache_dir.empty()) return;
  // The nearest existing directory: --cache-dir itself may not exist yet.
  std::filesystem::path p = std::filesystem::absolute(cache_dir);
  while (!std::filesystem::exists(p) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs fs{};
  if (::statvfs(p.c_str(), &fs) != 0) return;
  const uint64_t fs_bytes = uint64_t(fs.f_blocks) * uint64_t(fs.f_frsize);
  if (disk > fs_bytes) {
    throw UsageError("--cache-disk: " + as_given("cache-disk", disk) + " is more than the file system holding '" +
                     cache_dir + "'; expected 0.." + std::to_string(fs_bytes) + " bytes");
  }
  const uint64_t free_bytes = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
  if (disk > free_bytes) {
    spdlog::warn("--cache-disk {} bytes is more than the {} bytes free on the file system of '{}'", disk, free_bytes,
                 cache_dir);
  }
}

// --cache-remote and its durations, checked before the model loads (a bad URL or duration is an
// error naming the flag; an unreachable Redis is not: the tier is a cache, and a Redis that comes
// up later is used from then on).
cache::RemoteTierConfig ParseRemoteOptions(const std::string& url, const std::string& ttl, const std::string& timeout) {
  cache::RemoteTierConfig rc;
  if (url.empty() || url == "none") return rc;
  if (auto e = cache::ParseRemoteUrl(url); !e.ok()) throw UsageError(e.status().message());
  rc.url = url;
  auto t = cache::ParseDuration(ttl);
  if (!t.ok() || t.value() < std::chrono::seconds(1)) {
    throw UsageError("--cache-remote-ttl: " + (t.ok() ? "expected at least 1s, found '" + ttl + "'" : t.status().message()));
  }
  rc.ttl = t.value();
  auto d = cache::ParseDuration(timeout);
  if (!d.ok() || d.value().count() < 1 || d.value() > std::chrono::seconds(60)) {
    throw UsageError("--cache-remote-timeout: " +
                     (d.ok() ? "expected 1ms..60s, found '" + timeout + "'" : d.status().message()));
  }
  rc.timeout = d.value();
  return rc;
}

// The default directory (under /tmp when XDG_RUNTIME_DIR is unset) must be ours and closed to
// others: another user could otherwise pre-create it and swap the socket.
void CheckDefaultSocketDir(const std::string& socket_path) {
  const std::string dir = std::filesystem::path(socket_path).parent_path().string();
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) return;  // HttpServer creates it with mode 0700
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 0022)) {
    throw std::runtime_error("the socket directory '" + dir +
                             "' is not a directory of ours closed to others; remove it or pass --socket PATH");
  }
}

}  // namespace

int RunServe(int argc, char** argv) {
  po::options_description desc("cedar serve");
  std::string model_dir, socket_path, host, api_key_file, model_name, cache_dir, session_ram, weights;
  std::string cache_remote, cache_remote_ttl, cache_remote_timeout;
  std::vector<std::string> api_keys;
  std::string server_id;  // --server-id: this instance's name in a cluster (X-Cedar-Server)
  std::string decoder_policy = "auto", restore_policy = "staircase", device = "auto";
  int port = 0, io_threads = 2, threads = 0, max_sessions = 1024, default_max_tokens = 256, spec_tokens = 0;
  uint64_t seed = 0;  // --seed
  uint64_t max_connections = 1024, max_unix_connections = 256, max_body = 32u << 20, cache_ram = 0, cache_disk = 8ull << 30, max_ram = 0;
  double read_timeout = 60, drain_timeout = 10, auth_timeout = 5, sse_keepalive = 5;
  session::SchedulerOptions sched;  // defaults: session/session_manager.h
  std::string scheduler = session::SchedulerName(sched.kind);
  std::string batch_prefill = sched.batch_prefill ? "on" : "off";  // --batch-prefill on|off
  std::string phase_parts = sched.decoder_phase_in_parts ? "on" : "off";  // --decoder-phase-in-parts on|off
  std::string prefill_order = session::PrefillOrderName(sched.prefill_order);
  desc.add_options()("model", po::value(&model_dir)->required(), "model directory (config.json + model.safetensors)")(
      "socket", po::value(&socket_path),
      ("Unix socket path (mode 0600); default " + server::DefaultSocketPath() + "; \"none\" = TCP only").c_str())(
      "host", po::value(&host), "also listen on TCP at this address (default 127.0.0.1 when --port is given)")(
      "port", OptionalIntOption("--port", &port, 0, 65535), "TCP port (0 = any free port, printed at start); TCP is off without --port")(
      "api-key", po::value(&api_keys)->composing(),
      "a key TCP requests must send ('Authorization: Bearer KEY' or 'x-api-key: KEY'); repeatable, each key "
      "is a tenant with its own sessions and cache. Visible in `ps`: prefer --api-key-file or env CEDAR_API_KEY")(
      "api-key-file", po::value(&api_key_file), "read API keys from this file, one per line (# comments)")(
      "model-name", po::value(&model_name), "the model id /v1/models lists (default: the directory's name)")(
      "cache-ram", BytesOption("--cache-ram", &cache_ram, "1G"), "prefix cache RAM budget (at most the machine's memory)")(
      // No default shown: without --cache-dir there is no disk tier and the budget means nothing.
      "cache-disk",
      po::value<std::string>()->notifier([&](const std::string& v) {
        cache_disk = ParseBytesOption("--cache-disk", v, 0, kMaxBytesOption);
      }),
      "prefix cache disk budget, only with --cache-dir (8G there unless given; at most the size of the file system "
      "holding --cache-dir)")(
      "cache-dir", po::value(&cache_dir), "prefix cache disk tier (LMDB) directory; none = RAM only")(
      "cache-remote", po::value(&cache_remote),
      "shared cache tier under RAM and disk: redis://HOST[:PORT][/DB] or unix:///PATH[?db=DB] (several servers "
      "pointed at one Redis share what each caches; docs/SERVER.md \"Shared cache tier\")")(
      "cache-remote-ttl", po::value(&cache_remote_ttl)->default_value("72h"),
      "lifetime of a remote entry, renewed when a turn stores or finds it again (72h, 30m, 90s)")(
      "cache-remote-timeout", po::value(&cache_remote_timeout)->default_value("50ms"),
      "the most a turn waits on the remote tier; past it the read is a miss (50ms, 1s)")(
      "session-ram", po::value(&session_ram),
      "budget of session memory: live states plus the cache RAM their pins hold (default: half of --cache-ram); "
      "past it the least recently used sessions are demoted into the cache")(
      "restore-policy", po::value(&restore_policy)->default_value("staircase"),
      "a cached prefix without its snapshot: staircase (exact encoder restore of ~E*W rows) | replay "
      "(Encoder SWA Bounded Replay of W rows, approximate; caches nothing after) | recompute (from the "
      "deepest snapshot, exact)")(
      "decoder-policy", po::value(&decoder_policy)->default_value("auto"), "auto | exact | bounded")(
      "device", po::value(&device)->default_value("auto"),
      "cpu | cuda | auto (cuda when built with CUDA, a GPU exists and the CUDA engine runs the model, else cpu); cuda without a device, or for a model the CUDA engine refuses, fails at start")(
      "f32-weights", "CUDA: keep F32 weights on the device (default BF16)")(
      "mmap-weights", "read F32 weights in place from the file (less RAM, slower decode)")(
      "weights", po::value(&weights)->default_value("f32"), "matmul weights in memory: f32 | bf16 | int8 (block 32) | as-stored (BF16, released FP8/FP4 kept) | fp8-fp4 (the released precisions: experts FP4, head BF16, the rest FP8)")(
      "max-ram", BytesOption("--max-ram", &max_ram, "0"),
      "released DeepSeek-V4.1 layout: most bytes of dequantised weights to hold (0 = no limit; too small = a clear error)")(
      "max-sessions", IntOption("--max-sessions", &max_sessions, 1, 1 << 20),
      "sessions at most, live or demoted into the cache (POST /v1/sessions answers 429 beyond)")(
      "scheduler", po::value(&scheduler)->default_value(scheduler),
      "mixed (steps of every decoding turn's row plus prefill chunks up to --step-tokens) | serial "
      "(each prompt prefilled whole before anything else moves; the old loop, for comparison)")(
      "step-tokens", IntOption("--step-tokens", &sched.step_tokens, 1, 1 << 20),
      "mixed: rows per step, decode rows plus prefill chunks (a step runs at least one chunk)")(
      "step-ms", RealOption("--step-ms", &sched.step_ms, 0.0, 1e7),
      "mixed: a step adds no prefill chunk after its first once its predicted length (at the rates the last steps "
      "measured) would pass this many ms; 0 = rows only")(
      "max-prefill-chunk", IntOption("--max-prefill-chunk", &sched.max_prefill_chunk, 1, 1 << 20),
      "mixed: a prompt runs in chunks of this many tokens")(
      "prefill-order", po::value(&prefill_order)->default_value(prefill_order),
      "mixed: how a step's budget is shared among prefilling turns: fcfs (each turn, by priority then arrival, takes all "
      "the chunks that fit before the next gets any) | round-robin (one chunk each per round among equal priorities: a "
      "short prompt shares a step with a long one's chunk)")(
      "batch-prefill", po::value(&batch_prefill)->default_value(batch_prefill)->implicit_value("on"),
      "mixed: on (a step's decode rows ride in its first prefill pass through the encoder layers, and its prefill "
      "chunks of different turns, and their decoder phases, run as one engine pass each; every turn's rows keep "
      "their own products, so outputs do not depend on the other turns) | off (each chunk, then the decode rows, "
      "in passes of their own)")(
      "decoder-phase-in-parts", po::value(&phase_parts)->default_value(phase_parts)->implicit_value("on"),
      "mixed: on (a turn's decoder phase after its last chunk runs as many layers a step as the step budget holds, so "
      "no step holds a long prompt's whole replay; same outputs) | off (the default: the whole phase in one step)")(
      "int8-activations", "INT8 and FP4 weights: decode's products (up to 16 rows) on 8-bit activations, quantised per row and block of 32 (AVX-512 VNNI or AVX2: faster INT8 decode products, at the accuracy cost docs/WEIGHTS.md measures); prefill keeps F32 activations")(
      "bf16-activations", "FP8, FP4 and INT8 weights: decode's products (up to 16 rows) on BF16 activations, x rounded to bf16 per row (AVX-512 BF16: faster FP8 / FP4 / INT8 decode products, at the accuracy cost docs/WEIGHTS.md measures; FP4 takes them where --int8-activations is on too, INT8 keeps 8-bit ones); prefill keeps F32 activations")(
      "row-invariant-matmul",
      "every product sums each row in the decode kernels' order (kernels/gemm_rowinv.h), so rows of different turns "
      "share one product (and a prompt's rows equal its decode rows bit for bit); ~0.7x the prefill GEMM's rate")(
      "max-prefilling-turns", IntOption("--max-prefilling-turns", &sched.max_prefilling_turns, 1, 1 << 16),
      "mixed: turns prefilling at once at most (the others wait in the queue)")(
      "max-queued-turns", IntOption("--max-queued-turns", &sched.max_queued_turns, 0, 1 << 24),
      "turns waiting for admission at most; past it 429 with Retry-After (0 = no limit)")(
      "spec-tokens", IntOption("--spec-tokens", &spec_tokens, 0, 15),
      "speculative decoding: DSpark drafts verified per pass of a decoding turn (0 = off; models with mtp.* "
      "layers, CPU; turns with a grammar, logit_bias, penalties or logprobs decode plainly)")(
      "default-max-tokens", IntOption("--default-max-tokens", &default_max_tokens, 1, 1 << 24),
      "max_tokens when a request gives none")(
      "seed", OptionalIntOption<uint64_t>("--seed", &seed, 0, UINT64_MAX),
      "seeds the seeds drawn for sampled requests that give no `seed` (the same requests in the same order "
      "then sample the same tokens); default: random")(
      "io-threads", IntOption("--io-threads", &io_threads, 1, 256), "I/O threads")(
      "threads", IntOption("--threads", &threads, 0, 4096), "CPU threads for the model (0 = default)")(
      "max-connections", IntOption<uint64_t>("--max-connections", &max_connections, 1, 1 << 20),
      "TCP connections open at most (the Unix socket has its own budget)")(
      "max-unix-connections", IntOption<uint64_t>("--max-unix-connections", &max_unix_connections, 1, 1 << 20),
      "Unix socket connections open at most")(
      "max-body-bytes", BytesOption("--max-body-bytes", &max_body, "32M", 1024, 1ull << 32),
      "largest request body (413 beyond)")(
      "read-timeout", RealOption("--read-timeout", &read_timeout, 0.0, 86400.0, /*lo_open=*/true),
      "seconds to read one request; keep-alive idle time")(
      "auth-timeout", RealOption("--auth-timeout", &auth_timeout, 0.0, 3600.0, /*lo_open=*/true),
      "TCP: seconds a connection may take to send the headers of an authenticated request")(
      "drain-timeout", RealOption("--drain-timeout", &drain_timeout, 0.0, 3600.0),
      "at SIGINT/SIGTERM, seconds in-flight turns may run before they are cancelled")(
      "server-id", po::value(&server_id),
      "a name for this instance (1-64 of [A-Za-z0-9_.:-]), sent as the X-Cedar-Server header of every response, so "
      "that behind a load balancer a client sees which server answered (examples/cluster/)")(
      "sse-keepalive", RealOption("--sse-keepalive", &sse_keepalive, 0.0, 3600.0),
      "seconds of silence in a stream (queued or prefilling turn) before an SSE comment ': keep-alive' (0 = never)")(
      "no-access-log", "no info-level line per request (route, status, ms, tokens, session)");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  CheckFlags([&] { po::store(po::parse_command_line(argc, argv, desc), vm); });
  if (vm.count("help")) {
    std::cout << "usage: cedar serve --model DIR [--device cpu|cuda|auto] [--socket PATH] [--host ADDR --port N] "
                 "[--api-key-file FILE]\n\n"
              << desc << "\n";
    return 0;
  }
  CheckFlags([&] { po::notify(vm); });
  const bool tcp = vm.count("port") > 0;
  if (vm.count("host") && !tcp) throw UsageError("--host needs --port");
  if (tcp && host.empty()) host = "127.0.0.1";
  if (vm.count("server-id") && !server::ValidServerId(server_id)) {
    throw UsageError("--server-id: expected 1 to 64 characters from [A-Za-z0-9_.:-], found '" + server_id + "'");
  }
  if (cache_dir == "none") cache_dir.clear();  // RAM only, as the help says
  CheckCacheBudgets(cache_ram, cache_disk, cache_dir, vm);
  const cache::RemoteTierConfig remote = ParseRemoteOptions(cache_remote, cache_remote_ttl, cache_remote_timeout);
  server::ApiOptions policies;  // checked before the model loads
  if (!server::ParseRestorePolicy(restore_policy, &policies.restore_policy)) {
    throw UsageError("--restore-policy: expected staircase, replay or recompute, found '" + restore_policy + "'");
  }
  if (!server::ParseDecoderPolicy(decoder_policy, &policies.decoder_policy)) {
    throw UsageError("--decoder-policy: expected auto, exact or bounded, found '" + decoder_policy + "'");
  }
  if (!session::ParseScheduler(scheduler, &sched.kind)) {
    throw UsageError("--scheduler: expected mixed or serial, found '" + scheduler + "'");
  }
  if (!session::ParsePrefillOrder(prefill_order, &sched.prefill_order)) {
    throw UsageError("--prefill-order: expected round-robin or fcfs, found '" + prefill_order + "'");
  }
  if (batch_prefill != "on" && batch_prefill != "off")
    throw UsageError("--batch-prefill: expected on or off, found '" + batch_prefill + "'");
  sched.batch_prefill = batch_prefill == "on";
  if (phase_parts != "on" && phase_parts != "off")
    throw UsageError("--decoder-phase-in-parts: expected on or off, found '" + phase_parts + "'");
  sched.decoder_phase_in_parts = phase_parts == "on";
  if (sched.batch_prefill && !vm["batch-prefill"].defaulted() && sched.kind != session::SchedulerKind::kMixed)
    throw UsageError("--batch-prefill: expected --scheduler mixed, found '" + scheduler + "'");
  if (vm.count("row-invariant-matmul")) kernels::SetRowInvariantMatmul(true);
  if (vm.count("int8-activations")) EnableInt8Activations();
  if (vm.count("bf16-activations")) EnableBf16Activations();
  // Keys: --api-key (repeatable), --api-key-file, CEDAR_API_KEY; all of them count.
  if (!api_key_file.empty()) {
    for (std::string& k : server::ReadApiKeyFile(api_key_file)) api_keys.push_back(std::move(k));
  }
  if (const char* k = std::getenv("CEDAR_API_KEY"); k && *k) api_keys.push_back(k);
  CheckFlags([&] { (void)server::ApiKeys(api_keys); });  // before the model loads: throws on an empty or spaced key
  // Checked before the model loads: an unknown name, or cuda in a build or on a machine without it.
  session::ManagerOptions mo;
  CheckFlags([&] { (void)ResolveDevice(device); });  // an unknown name fails here
  // "auto" is decided once the model is loaded (MakeBackend): the CPU when the CUDA engine
  // refuses the model's released switches, instead of the refusal.
  mo.backend.device = device;
  mo.backend.f32_weights = vm.count("f32-weights") > 0;
  if (mo.backend.device == "cuda") {
    std::string why;
    if (!CudaAvailable(&why)) throw std::runtime_error("--device cuda: " + why);
  }
  // Logs go to stderr: stdout carries only the "listening" line.
  {
    const spdlog::level::level_enum level = spdlog::get_level();
    spdlog::set_default_logger(spdlog::stderr_color_mt("cedar-serve"));
    spdlog::set_level(level);
  }
  if (!vm.count("socket")) {
    socket_path = server::DefaultSocketPath();
    CheckDefaultSocketDir(socket_path);
  }
  if (socket_path == "none") socket_path.clear();
  if (!api_keys.empty() && host.empty()) spdlog::warn("API keys apply to TCP only; the Unix socket is guarded by its mode");

  kernels::SetThreads(threads);
  LoadOptions load;
  load.mmap_weights = vm.count("mmap-weights") > 0;
  load.max_ram_bytes = int64_t(max_ram);
  load.weights = CheckFlags([&] { return ParseWeightPrecision(weights); });
  std::shared_ptr<const Model> model = Model::Load(model_dir, load);
  // The tokenizer config.json declares ("byte" or "bpe" with tokenizer.json beside it).
  // A deepseek_v41 model uses the released encoding's own specials, not Cedar's.
  bridge::ModelTokenizerOptions to;
  to.cedar_chat_specials = bridge::ChatFormatOf(model->config()) == bridge::ChatFormat::kCedar;
  std::shared_ptr<const bridge::Tokenizer> tokenizer = bridge::LoadModelTokenizer(model_dir, model->config().vocab_size, to);
  if (model_name.empty()) model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (model_name.empty()) model_name = "cedar";

  mo.cache_ram_bytes = cache_ram;
  mo.cache_disk_bytes = cache_disk;
  mo.cache_dir = cache_dir;  // "" (or --cache-dir none, cleared above) = RAM only
  mo.cache_remote = remote;  // url "" = no shared tier
  if (!session_ram.empty()) mo.session_ram_bytes = ParseBytesOption("--session-ram", session_ram, 1, kMaxBytesOption);
  mo.max_sessions = max_sessions;
  mo.scheduler = sched;
  mo.spec_tokens = spec_tokens;  // Start refuses it for a model without DSpark layers
  std::unique_ptr<session::SessionManager> manager = session::SessionManager::Start(model, mo);

  server::ApiOptions ao = policies;
  ao.model_name = model_name;
  ao.tokenizer = tokenizer;
  ao.default_max_tokens = default_max_tokens;
  if (vm.count("seed")) ao.seed = seed;
  ao.access_log = vm.count("no-access-log") == 0;
  // deepseek_v41 replay memory beside the disk cache (when the cache made its directory).
  if (!mo.cache_dir.empty() && std::filesystem::is_directory(mo.cache_dir)) {
    ao.replay_memory_path = mo.cache_dir + "/replay_memory.jsonl";
  }
  server::Api api(*manager, ao);

  server::ServerOptions so;
  so.unix_socket = socket_path;
  so.tcp_host = host;
  so.tcp_port = uint16_t(port);
  so.api_keys = api_keys;
  so.io_threads = io_threads;
  so.max_connections = size_t(max_connections);
  so.max_unix_connections = size_t(max_unix_connections);
  so.max_body_bytes = size_t(max_body);
  so.read_timeout_s = read_timeout;
  so.auth_timeout_s = auth_timeout;
  so.drain_timeout_s = drain_timeout;
  so.server_id = server_id;
  so.sse_keepalive_s = sse_keepalive;
  server::HttpServer http(api, *manager, so);
  std::signal(SIGPIPE, SIG_IGN);
  http.Start();
  // One JSON line on stdout says where the server listens (scripts read it; see docs/SERVER.md).
  nlohmann::json ready = {{"event", "listening"}, {"model", model_name}, {"device", manager->device()}, {"pid", ::getpid()}};
  ready["unix_socket"] = http.unix_path().empty() ? nlohmann::json(nullptr) : nlohmann::json(http.unix_path());
  if (!server_id.empty()) ready["server_id"] = server_id;
  ready["tcp"] = host.empty() ? nlohmann::json(nullptr) : nlohmann::json(host + ":" + std::to_string(http.tcp_port()));
  std::cout << ready.dump() << std::endl;
  const int rc = http.RunUntilSignal();
  spdlog::info("stopped cleanly");
  return rc;
}

}  // namespace cedar::cli
