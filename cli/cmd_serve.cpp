// cedar serve: the HTTP API (docs/SERVER.md) on a Unix socket and optionally TCP.
#include <sys/stat.h>
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

#include "cache/byte_size.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "kernels/ops.h"
#include "session/session_manager.h"
#include "cli/commands.h"
#include "tools_bridge/lib/chat_format.h"
#include "tools_bridge/lib/model_tokenizer.h"
#include "server/api.h"
#include "server/http_server.h"

namespace po = boost::program_options;

namespace cedar::cli {
namespace {

// The cache's size syntax (cache/byte_size.h), with the flag named in the error.
uint64_t ParseBytes(const std::string& s, const char* flag) {
  try {
    return cache::ParseByteSize(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(flag) + ": " + e.what());
  }
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
  std::string model_dir, socket_path, host, api_key, model_name, cache_ram, cache_disk, cache_dir, session_ram;
  std::string decoder_policy = "auto", restore_policy = "staircase", device = "auto";
  int port = -1, io_threads = 2, threads = 0, max_sessions = 1024, default_max_tokens = 256;
  size_t max_connections = 1024, max_body = 32u << 20;
  double read_timeout = 60, drain_timeout = 10;
  desc.add_options()("model", po::value(&model_dir)->required(), "model directory (config.json + model.safetensors)")(
      "socket", po::value(&socket_path),
      ("Unix socket path (mode 0600); default " + server::DefaultSocketPath() + "; \"none\" = TCP only").c_str())(
      "host", po::value(&host), "also listen on TCP at this address (default 127.0.0.1 when --port is given)")(
      "port", po::value(&port), "TCP port (0 = any free port, printed at start)")(
      "api-key", po::value(&api_key), "TCP requests must send 'Authorization: Bearer KEY' (or env CEDAR_API_KEY)")(
      "model-name", po::value(&model_name), "the model id /v1/models lists (default: the directory's name)")(
      "cache-ram", po::value(&cache_ram)->default_value("1G"), "prefix cache RAM budget")(
      "cache-disk", po::value(&cache_disk)->default_value("8G"), "prefix cache disk budget")(
      "cache-dir", po::value(&cache_dir), "prefix cache disk tier (LMDB) directory; none = RAM only")(
      "session-ram", po::value(&session_ram),
      "budget of session memory: live states plus the cache RAM their pins hold (default: half of --cache-ram); "
      "past it the least recently used sessions are demoted into the cache")(
      "restore-policy", po::value(&restore_policy)->default_value("staircase"),
      "a cached prefix without its snapshot: staircase (exact encoder restore of ~E*W rows) | replay "
      "(Encoder SWA Bounded Replay of W rows, approximate; caches nothing after) | recompute (from the "
      "deepest snapshot, exact)")(
      "decoder-policy", po::value(&decoder_policy)->default_value("auto"), "auto | exact | bounded")(
      "device", po::value(&device)->default_value("auto"),
      "cpu | cuda | auto (cuda when built with CUDA and a GPU exists); cuda without a device fails at start")(
      "f32-weights", "CUDA: keep F32 weights on the device (default BF16)")(
      "mmap-weights", "read F32 weights in place from the file (less RAM, slower decode)")(
      "max-sessions", po::value(&max_sessions)->default_value(1024),
      "sessions at most, live or demoted into the cache (POST /v1/sessions answers 429 beyond)")(
      "default-max-tokens", po::value(&default_max_tokens)->default_value(256), "max_tokens when a request gives none")(
      "io-threads", po::value(&io_threads)->default_value(2), "I/O threads")(
      "threads", po::value(&threads)->default_value(0), "CPU threads for the model (0 = default)")(
      "max-connections", po::value(&max_connections)->default_value(1024), "open connections at most")(
      "max-body-bytes", po::value(&max_body)->default_value(32u << 20), "largest request body (413 beyond)")(
      "read-timeout", po::value(&read_timeout)->default_value(60), "seconds to read one request; keep-alive idle time")(
      "drain-timeout", po::value(&drain_timeout)->default_value(10),
      "at SIGINT/SIGTERM, seconds in-flight turns may run before they are cancelled");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << "usage: cedar serve --model DIR [--device cpu|cuda|auto] [--socket PATH] [--host ADDR --port N] [--api-key KEY]\n\n"
              << desc << "\n";
    return 0;
  }
  po::notify(vm);
  server::ApiOptions policies;  // checked before the model loads
  if (!server::ParseRestorePolicy(restore_policy, &policies.restore_policy)) {
    throw std::invalid_argument("--restore-policy: expected staircase, replay or recompute, found '" + restore_policy + "'");
  }
  if (!server::ParseDecoderPolicy(decoder_policy, &policies.decoder_policy)) {
    throw std::invalid_argument("--decoder-policy: expected auto, exact or bounded, found '" + decoder_policy + "'");
  }
  // Checked before the model loads: an unknown name, or cuda in a build or on a machine without it.
  session::ManagerOptions mo;
  mo.backend.device = ResolveDevice(device);
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
  if (api_key.empty()) {
    if (const char* k = std::getenv("CEDAR_API_KEY")) api_key = k;
  }
  if (!vm.count("socket")) {
    socket_path = server::DefaultSocketPath();
    CheckDefaultSocketDir(socket_path);
  }
  if (socket_path == "none") socket_path.clear();
  if (vm.count("host") && port < 0) throw std::invalid_argument("--host needs --port");
  if (port > 65535) throw std::invalid_argument("--port: expected 0..65535");
  if (port >= 0 && host.empty()) host = "127.0.0.1";
  if (!api_key.empty() && host.empty()) spdlog::warn("--api-key applies to TCP only; the Unix socket is guarded by its mode");

  kernels::SetThreads(threads);
  LoadOptions load;
  load.mmap_weights = vm.count("mmap-weights") > 0;
  std::shared_ptr<const Model> model = Model::Load(model_dir, load);
  // The tokenizer config.json declares ("byte" or "bpe" with tokenizer.json beside it).
  // A deepseek_v41 model uses the released encoding's own specials, not Cedar's.
  bridge::ModelTokenizerOptions to;
  to.cedar_chat_specials = bridge::ChatFormatOf(model->config()) == bridge::ChatFormat::kCedar;
  std::shared_ptr<const bridge::Tokenizer> tokenizer = bridge::LoadModelTokenizer(model_dir, model->config().vocab_size, to);
  if (model_name.empty()) model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (model_name.empty()) model_name = "cedar";

  mo.cache_ram_bytes = ParseBytes(cache_ram, "--cache-ram");
  mo.cache_disk_bytes = ParseBytes(cache_disk, "--cache-disk");
  mo.cache_dir = cache_dir == "none" ? std::string() : cache_dir;  // "none" = RAM only, as the help says
  if (!session_ram.empty()) {
    mo.session_ram_bytes = ParseBytes(session_ram, "--session-ram");
    if (mo.session_ram_bytes == 0) throw std::invalid_argument("--session-ram: expected a size > 0, found '" + session_ram + "'");
  }
  if (max_sessions < 1) throw std::invalid_argument("--max-sessions: expected an integer >= 1, found " + std::to_string(max_sessions));
  mo.max_sessions = max_sessions;
  std::unique_ptr<session::SessionManager> manager = session::SessionManager::Start(model, mo);

  server::ApiOptions ao = policies;
  ao.model_name = model_name;
  ao.tokenizer = tokenizer;
  ao.default_max_tokens = default_max_tokens;
  // deepseek_v41 replay memory beside the disk cache (when the cache made its directory).
  if (!mo.cache_dir.empty() && std::filesystem::is_directory(mo.cache_dir)) {
    ao.replay_memory_path = mo.cache_dir + "/replay_memory.jsonl";
  }
  server::Api api(*manager, ao);

  server::ServerOptions so;
  so.unix_socket = socket_path;
  so.tcp_host = host;
  so.tcp_port = uint16_t(port < 0 ? 0 : port);
  so.api_key = api_key;
  so.io_threads = io_threads;
  so.max_connections = max_connections;
  so.max_body_bytes = max_body;
  so.read_timeout_s = read_timeout;
  so.drain_timeout_s = drain_timeout;
  server::HttpServer http(api, *manager, so);
  std::signal(SIGPIPE, SIG_IGN);
  http.Start();
  // One JSON line on stdout says where the server listens (scripts read it; see docs/SERVER.md).
  nlohmann::json ready = {{"event", "listening"}, {"model", model_name}, {"device", manager->device()}, {"pid", ::getpid()}};
  ready["unix_socket"] = http.unix_path().empty() ? nlohmann::json(nullptr) : nlohmann::json(http.unix_path());
  ready["tcp"] = host.empty() ? nlohmann::json(nullptr) : nlohmann::json(host + ":" + std::to_string(http.tcp_port()));
  std::cout << ready.dump() << std::endl;
  const int rc = http.RunUntilSignal();
  spdlog::info("stopped cleanly");
  return rc;
}

}  // namespace cedar::cli
