// Server benchmark: many concurrent agent sessions on one model, over the Unix socket, sharing
// one system prompt (+ tool schemas, pinned once with POST /v1/sessions before the sessions
// start). Each session plays --turns turns; every turn sends the
// previous reply back verbatim plus a scripted tool call and its result (as examples/agent).
// Prints one JSON object per (preset, concurrency, mode):
//   turns_per_s, TTFT p50/p99 as the client sees it (send -> first token's event; streamed
//   mode), the engine's own TTFT, cache RAM bytes, cached share of prompt tokens, and the
//   server overhead: client wall time per request minus the session manager's own time for the
//   turn (cedar.manager_ms: Submit -> result, so queueing for the engine thread, compute and
//   the manager's bookkeeping are out), i.e. HTTP, JSON, rendering, SSE, sockets, threads (and
//   the client's own I/O: an upper bound). manager_after_total_ms is the part of manager_ms
//   after TurnAccounting::total_ms was stamped (the cache insert at the end of a turn).
//
//   bench_server [--presets tiny,small] [--concurrency 1,8,32,128] [--turns 4] [--max-tokens 16]
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <charconv>

#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"

#include "engine/init.h"
#include "engine/model.h"
#include "kernels/ops.h"
#include "session/session_manager.h"
#include "server/api.h"
#include "server/http_server.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The number at the start of `text` (a status code, Content-Length or a chunk size in `base`);
// anything else is the server's malformed response, said in our words.
size_t HttpNumber(std::string_view text, int base, const char* what) {
  size_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (ec != std::errc() || end == text.data()) {
    throw std::runtime_error(std::string("malformed HTTP response: ") + what + " '" + std::string(text.substr(0, 20)) + "'");
  }
  return v;
}

// A blocking HTTP/1.1 client on one Unix-socket connection.
class Client {
 public:
  explicit Client(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
  }
  ~Client() { ::close(fd_); }

  struct Result {
    int status = 0;
    std::string body;        // de-chunked
    double first_event_ms = -1;  // streamed: send -> the first event after the role chunk
    double wall_ms = 0;
  };

  Result Post(const std::string& target, const std::string& body) {
    const std::string req = "POST " + target + " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    const auto t0 = Clock::now();
    for (size_t off = 0; off < req.size();) {
      const ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += size_t(n);
    }
    Result r;
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) Fill();
    r.status = int(HttpNumber(std::string_view(buf_).substr(9, 3), 10, "status code"));
    const std::string head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    if (head.find("Transfer-Encoding: chunked") == std::string::npos) {
      const size_t cl = head.find("Content-Length: ");
      if (cl == std::string::npos) throw std::runtime_error("malformed HTTP response: neither chunked nor a Content-Length");
      const size_t len = HttpNumber(std::string_view(head).substr(cl + 16), 10, "Content-Length");
      while (buf_.size() < len) Fill();
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
      r.wall_ms = MsSince(t0);
      return r;
    }
    int events = 0;
    for (;;) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos) Fill();
      const size_t size = HttpNumber(std::string_view(buf_).substr(0, eol), 16, "chunk size");
      while (buf_.size() < eol + 4 + size) Fill();
      const std::string chunk = buf_.substr(eol + 2, size);
      buf_.erase(0, eol + 4 + size);
      if (size == 0) break;
      for (size_t p = chunk.find("data: "); p != std::string::npos; p = chunk.find("data: ", p + 6)) {
        if (++events == 2 && r.first_event_ms < 0) r.first_event_ms = MsSince(t0);
      }
      r.body += chunk;
    }
    r.wall_ms = MsSince(t0);
    return r;
  }

 private:
  void Fill() {
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) throw std::runtime_error("connection closed");
    buf_.append(tmp, size_t(n));
  }
  int fd_ = -1;
  std::string buf_;
};

struct Sample {
  double client_ttft_ms = -1, engine_ttft_ms = 0, wall_ms = 0, engine_total_ms = 0, manager_ms = 0;
  int64_t prompt = 0, cached = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

json SystemPrompt(size_t chars) {
  std::string text = "You are a coding agent working in a large C++ repository. ";
  while (text.size() < chars) text += "Read files before editing them; run the tests after each change; explain briefly. ";
  return {{"role", "system"}, {"content", text.substr(0, chars)}};
}

json Tools() {
  json tools = json::array();
  for (const char* name : {"search_code", "read_file", "edit_file", "run_tests"}) {
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", name},
                       {"description", std::string("The ") + name + " tool."},
                       {"parameters", {{"type", "object"}, {"properties", {{"arg", {{"type", "string"}}}}}}}}}});
  }
  return tools;
}

// One session's turns; appends a sample per turn.
void RunSession(const std::string& socket, int index, int turns, int max_tokens, bool stream, const json& system,
                const json& tools, std::vector<Sample>& out) {
  Client c(socket);
  const std::string sid = "bench-" + std::to_string(index) + (stream ? "-s" : "-w");
  if (c.Post("/v1/sessions", json{{"session_id", sid}}.dump()).status != 200) throw std::runtime_error("session");
  json messages = {system, {{"role", "user"}, {"content", "Task " + std::to_string(index) + ": fix the failing test."}}};
  for (int t = 0; t < turns; ++t) {
    json body = {{"session_id", sid}, {"messages", messages}, {"tools", tools}, {"max_tokens", max_tokens},
                 {"temperature", 0.8}, {"seed", index * 100 + t}, {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    const Client::Result r = c.Post("/v1/chat/completions", body.dump());
    if (r.status != 200) throw std::runtime_error("turn failed: " + r.body.substr(0, 300));
    json reply, cedar;
    if (stream) {
      reply = {{"role", "assistant"}, {"content", ""}};
      std::istringstream lines(r.body);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data: {", 0) != 0) continue;
        const json e = json::parse(line.substr(6));
        if (e.contains("cedar")) cedar = e["cedar"];
        if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
          reply["content"] = reply["content"].get<std::string>() + e["choices"][0]["delta"]["content"].get<std::string>();
        }
      }
    } else {
      const json j = json::parse(r.body);
      reply = j["choices"][0]["message"];
      cedar = j["cedar"];
    }
    Sample s;
    s.client_ttft_ms = r.first_event_ms;
    s.engine_ttft_ms = cedar["ttft_ms"];
    s.engine_total_ms = cedar["total_ms"];
    s.manager_ms = cedar["manager_ms"];
    s.wall_ms = r.wall_ms;
    s.prompt = cedar["prompt_tokens"];
    s.cached = cedar["cached_tokens"];
    out.push_back(s);
    const std::string id = "call_" + std::to_string(t);
    messages.push_back(reply);
    messages.push_back({{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls", {{{"id", id}, {"type", "function"},
                                         {"function", {{"name", "read_file"}, {"arguments", "{\"arg\":\"src/x.cc\"}"}}}}}}});
    messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "int main() { return 0; }  // turn " + std::to_string(t)}});
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void RunPreset(const std::string& preset, const std::vector<int>& concurrency, int turns, int max_tokens,
               size_t system_chars) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("cedar-bench-server-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  cedar::ModelConfig cfg;
  if (!cedar::PresetConfig(preset, &cfg)) throw std::runtime_error("unknown preset " + preset);
  cedar::WriteRandomModel(cfg, 1, dir + "/model");
  std::shared_ptr<const cedar::Model> model = cedar::Model::Load(dir + "/model");
  const json system = SystemPrompt(system_chars);
  const json tools = Tools();
  for (bool stream : {false, true}) {
    for (int n : concurrency) {
      // A fresh server per point: the cache starts empty, the first session fills it.
      auto manager = cedar::session::SessionManager::Start(model, {});
      cedar::server::ApiOptions ao;
      ao.model_name = preset;
      cedar::server::Api api(*manager, ao);
      cedar::server::ServerOptions so;
      so.unix_socket = dir + "/bench.sock";
      so.max_unix_connections = size_t(n) + 16;  // the Unix socket has its own budget
      cedar::server::HttpServer http(api, *manager, so);
      http.Start();
      {
        // Pin the shared system prompt and tool schemas first, as an agent platform would
        // (turn 1 of sessions started together would otherwise all miss: none has finished).
        Client pin(so.unix_socket);
        const Client::Result r = pin.Post(
            "/v1/sessions", json{{"messages", json::array({system})}, {"tools", tools}, {"pin_ttl_s", 600}}.dump());
        if (r.status != 200) throw std::runtime_error("pin: " + r.body);
      }
      std::vector<std::vector<Sample>> samples(static_cast<size_t>(n));
      std::atomic<int> failed{0};
      const auto t0 = Clock::now();
      std::vector<std::thread> threads;
      for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
          try {
            RunSession(so.unix_socket, i, turns, max_tokens, stream, system, tools, samples[size_t(i)]);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "session %d: %s\n", i, e.what());
            failed++;
          }
        });
      }
      for (auto& t : threads) t.join();
      const double seconds = MsSince(t0) / 1000;
      const cedar::session::EngineMetrics m = manager->Metrics();
      http.Stop();
      std::vector<double> client_ttft, engine_ttft, overhead, after_total;
      int64_t prompt = 0, cached = 0, count = 0;
      for (const auto& v : samples) {
        for (const Sample& s : v) {
          if (s.client_ttft_ms >= 0) client_ttft.push_back(s.client_ttft_ms);
          engine_ttft.push_back(s.engine_ttft_ms);
          overhead.push_back(s.wall_ms - s.manager_ms);
          after_total.push_back(s.manager_ms - s.engine_total_ms);
          prompt += s.prompt;
          cached += s.cached;
          count++;
        }
      }
      json j = {{"bench", "server"},
                {"preset", preset},
                {"mode", stream ? "stream" : "whole"},
                {"concurrency", n},
                {"turns", count},
                {"failed_sessions", failed.load()},
                {"seconds", seconds},
                {"turns_per_s", double(count) / seconds},
                {"engine_ttft_ms", {{"p50", Percentile(engine_ttft, 0.5)}, {"p99", Percentile(engine_ttft, 0.99)}}},
                {"server_overhead_ms", {{"p50", Percentile(overhead, 0.5)}, {"p99", Percentile(overhead, 0.99)}}},
                {"manager_after_total_ms",
                 {{"p50", Percentile(after_total, 0.5)}, {"p99", Percentile(after_total, 0.99)}}},
                {"cache_ram_bytes", m.ram_bytes},
                {"prompt_tokens", prompt},
                {"cached_share", prompt ? double(cached) / double(prompt) : 0}};
      if (stream) {
        j["client_ttft_ms"] = {{"p50", Percentile(client_ttft, 0.5)}, {"p99", Percentile(client_ttft, 0.99)}};
      }
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string presets = "tiny";
  int turns = 4, max_tokens = 16;
  size_t system_chars = 2000;
  std::vector<int> c = {1, 8, 32, 128};
  auto desc = cedar::bench::Options("bench_server: agents' turns against the HTTP server, by concurrency, as JSON lines");
  desc.add_options()("presets", po::value(&presets)->default_value(presets), "model presets (comma-separated)")(
      "concurrency", cedar::bench::IntListOption("--concurrency", &c, 1, 1 << 16), "concurrent agents (comma-separated)")(
      "turns", cedar::cli::IntOption("--turns", &turns, 1, 1 << 20), "turns per agent")(
      "max-tokens", cedar::cli::IntOption("--max-tokens", &max_tokens, 0, 1 << 24), "tokens per turn")(
      "system-chars", cedar::cli::IntOption<size_t>("--system-chars", &system_chars, 0, size_t(1) << 30),
      "characters of the shared system prompt");
  if (const int rc = cedar::bench::ParseFlags("bench_server", desc, argc, argv); rc >= 0) return rc;
  try {
    for (const std::string& p : Split(presets)) RunPreset(p, c, turns, max_tokens, system_chars);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_server: %s\n", e.what());
    return 1;
  }
  return 0;
}
