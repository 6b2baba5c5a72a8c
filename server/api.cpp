// Api: routing, sessions, models, health, metrics and cache state. The turn endpoints are in
// api_turns.cpp.
#include "server/api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string_view>

#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/openai_json.h"
#include "server/api_error.h"
#include "server/request_parse.h"
#include "server/session_ids.h"
#include "server/tenant.h"
#include "tools_bridge/lib/json_limits.h"

namespace cedar::server {

using nlohmann::json;

namespace {

constexpr std::string_view kSessionsPrefix = "/v1/sessions/";
constexpr size_t kDefaultListLimit = 100, kMaxListLimit = 1000;  // GET /v1/sessions page sizes

// The value of query parameter `name` in `target` (percent-decoded), or nullopt.
std::optional<std::string> ListQueryParam(const std::string& target, const std::string& name) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return std::nullopt;
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit((unsigned char)raw[i + 1]) &&
          std::isxdigit((unsigned char)raw[i + 2])) {
        out += char(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    return out;
  }
  return std::nullopt;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ApiError MethodNotAllowed(const std::string& method, const std::string& path, const char* allow) {
  return ApiError(405, "invalid_request_error", "method_not_allowed",
                  bridge::Clip(method, 20) + " " + bridge::Clip(path, 100) + " is not supported (allowed: " + allow + ")");
}

// The id in /v1/sessions/{id}: percent-decoded, then held to session_ids.h's alphabet.
std::string SessionIdFromPath(std::string_view segment) {
  std::optional<std::string> id = PercentDecode(segment);
  if (!id) {
    throw InvalidRequest("the path's session id \"" + bridge::Clip(segment, 40) + "\" has a malformed %-escape",
                         "session_id");
  }
  CheckSessionId(*id, "the path");
  return *id;
}

// Longest pin_ttl_s: 30 days (a longer pin is a leak; the value also becomes milliseconds).
constexpr double kMaxPinTtlSeconds = 30 * 24 * 3600.0;

json SessionJson(const session::SessionInfo& s) {
  return {{"id", s.id},          {"object", "session"},         {"tokens", s.tokens},
          {"live", s.live},      {"turns", s.turns},            {"pinned_tokens", s.pinned_tokens},
          {"idle_seconds", s.idle_seconds}};
}

}  // namespace

const char* DecoderPolicyName(session::DecoderPolicy p) {
  switch (p) {
    case session::DecoderPolicy::kAuto: return "auto";
    case session::DecoderPolicy::kExact: return "exact";
    case session::DecoderPolicy::kBounded: return "bounded";
  }
  return "?";
}

const char* RestorePolicyName(session::RestorePolicy p) {
  switch (p) {
    case session::RestorePolicy::kStaircase: return "staircase";
    case session::RestorePolicy::kReplay: return "replay";
    case session::RestorePolicy::kRecompute: return "recompute";
  }
  return "?";
}

bool ParseDecoderPolicy(const std::string& s, session::DecoderPolicy* out) {
  for (auto p : {session::DecoderPolicy::kAuto, session::DecoderPolicy::kExact, session::DecoderPolicy::kBounded}) {
    if (s == DecoderPolicyName(p)) return *out = p, true;
  }
  return false;
}

bool ParseRestorePolicy(const std::string& s, session::RestorePolicy* out) {
  for (auto p : {session::RestorePolicy::kStaircase, session::RestorePolicy::kReplay, session::RestorePolicy::kRecompute}) {
    if (s == RestorePolicyName(p)) return *out = p, true;
  }
  return false;
}

Api::Api(session::SessionManager& manager, ApiOptions options)
    : manager_(manager),
      options_(std::move(options)),
      tokenizer_owner_(options_.tokenizer ? options_.tokenizer
                                          : std::make_shared<bridge::ByteTokenizer>(manager.model().config().vocab_size)),
      tokenizer_(*tokenizer_owner_),
      format_(bridge::ChatFormatOf(manager.model().config())),
      memory_(options_.remembered_turns_per_session),
      created_(UnixNow()),
      responses_(options_.responses_max_stored),
      rng_(std::random_device{}()),
      seed_rng_(options_.seed ? *options_.seed : std::random_device{}()) {
  if (format_ == bridge::ChatFormat::kDeepseekV41) {
    // The released encoding is text over the released BPE vocabulary; the byte tokenizer has
    // none of its special tokens.
    if (!dynamic_cast<const bridge::BpeTokenizer*>(&tokenizer_)) {
      throw std::invalid_argument(
          "the model's config.json says \"chat_format\": \"deepseek_v41\", which needs the released BPE "
          "tokenizer (\"tokenizer\": \"bpe\" with tokenizer.json beside config.json); found the byte tokenizer");
    }
    dsml_ = std::make_unique<DsmlPrompter>(tokenizer_, options_.remembered_turns_per_session);
    if (!options_.replay_memory_path.empty()) dsml_->memory().Persist(options_.replay_memory_path);
  } else {
    template_ = std::make_unique<bridge::ChatTemplate>(tokenizer_);
  }
  for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
    if (auto name = tokenizer_.SpecialName(id); name && name->find("image") != std::string_view::npos) image_ids_.push_back(id);
  }
  spdlog::debug("chat format {}; {} image tokens refused in prompts", bridge::ChatFormatName(format_), image_ids_.size());
}

void Api::DetachManager() {
  draining_.store(true);
  std::unique_lock<std::shared_mutex> lk(gate_);
  manager_detached_ = true;
}

std::string Api::RouteOf(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/sessions", "/v1/models", "/v1/cache",
                        "/metrics", "/health", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens",
                        "/tokenize", "/detokenize", "/apply-template", "/v1/cache/flush", "/version"}) {
    if (path == r) return r;
  }
  if (path.starts_with(kSessionsPrefix) && path.size() > kSessionsPrefix.size()) return "/v1/sessions/{id}";
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  if (path.starts_with("/v1/responses/") && path.size() > std::string_view("/v1/responses/").size()) return "/v1/responses/{id}";
  return "other";
}

HttpResponse Api::Handle(const HttpRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path = request.target.substr(0, request.target.find('?'));
  const std::string route = RouteOf(path);
  HttpResponse response;
  try {
    if (route == "/v1/chat/completions" || route == "/v1/completions") {
      if (request.method != "POST") throw MethodNotAllowed(request.method, path, "POST");
      if (route == "/v1/chat/completions") response = ChatCompletions(request, start);
      else response = Completions(request, start);
    } else if (route == "/v1/responses") {
      if (request.method != "POST") throw MethodNotAllowed(request.method, path, "POST");
      response = Responses(request, start);
    } else if (route == "/v1/messages" || route == "/v1/messages/count_tokens") {
      response = Messages(request, start);  // Anthropic's error shape, 405 included
    } else {
      response = Route(request, path);
    }
  } catch (const ApiError& e) {
    response = ErrorResponse(e);
  } catch (const std::exception& e) {
    // Never the exception's text to the client (it may be a library's); the log has it.
    response = ErrorResponse(InternalError(request.method + " " + bridge::Clip(path, 100) + ": " + e.what()));
  }
  // A streamed response is counted by its `complete`, when its turn ends.
  if (!response.stream) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_.Request(route, response.status, seconds);
    // A turn answered 200 was logged with its tokens by RunTurn.
    const bool turn_route = route == "/v1/chat/completions" || route == "/v1/completions";
    if (!(turn_route && response.status == 200)) AccessLog(request, route, response.status, seconds, nullptr, "");
  }
  return response;
}

void Api::AccessLog(const HttpRequest& request, const std::string& route, int status, double seconds,
                    const session::TurnResult* turn, const std::string& session_id) const {
  if (!options_.access_log) return;
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (!turn) {
    spdlog::info("access: {} {} {} {:.1f} ms", bridge::Clip(request.method, 10), bridge::Clip(path, 100), status,
                 seconds * 1000);
    return;
  }
  const session::TurnAccounting& a = turn->accounting;
  spdlog::info("access: {} {} {} {:.1f} ms prompt={} cached={} generated={} session={}", request.method, route, status,
               seconds * 1000, a.prompt_tokens, a.cached_tokens(), turn->output.size(),
               session_id.empty() ? "-" : session_id);
}

HttpResponse Api::Route(const HttpRequest& request, const std::string& path) {
  const std::string& m = request.method;
  if (path == "/health") {
    if (m != "GET" && m != "HEAD") throw MethodNotAllowed(m, path, "GET");
    return Health();
  }
  if (path == "/metrics") {
    if (m != "GET") throw MethodNotAllowed(m, path, "GET");
    return Metrics();
  }
  if (path == "/v1/models") {
    if (m != "GET") throw MethodNotAllowed(m, path, "GET");
    return Models();
  }
  if (path.starts_with("/v1/models/")) {
    if (m != "GET") throw MethodNotAllowed(m, path, "GET");
    const std::string id = PercentDecode(std::string_view(path).substr(11)).value_or(path.substr(11));
    if (id != options_.model_name) {
      throw ApiError(404, "not_found_error", "model_not_found", "unknown model '" + bridge::Clip(id, 100) + "'", "model");
    }
    return JsonResponse(200, json::parse(Models().body)["data"][0]);
  }
  if (path == "/tokenize" || path == "/detokenize" || path == "/apply-template" || path == "/v1/cache/flush" ||
      path == "/version") {
    return Admin(request, path);
  }
  if (path.starts_with("/v1/responses/") && path.size() > std::string_view("/v1/responses/").size()) {
    if (m != "GET" && m != "DELETE") throw MethodNotAllowed(m, path, "GET, DELETE");
    return StoredResponse(request, path);
  }
  if (path == "/v1/cache") {
    if (m != "GET") throw MethodNotAllowed(m, path, "GET");
    return Cache();
  }
  if (path == "/v1/sessions") {
    if (m == "POST") return CreateSession(request);
    if (m == "GET") return ListSessions(request);
    throw MethodNotAllowed(m, path, "GET, POST");
  }
  if (path.starts_with(kSessionsPrefix) && path.size() > kSessionsPrefix.size()) {
    if (m != "GET" && m != "DELETE") throw MethodNotAllowed(m, path, "GET, DELETE");
    const std::string id = SessionIdFromPath(std::string_view(path).substr(kSessionsPrefix.size()));
    if (m == "GET") return GetSession(request, id);
    return DeleteSession(request, id);
  }
  throw ApiError(404, "not_found_error", "unknown_route",
                 "no route for " + bridge::Clip(m, 20) + " " + bridge::Clip(path, 100));
}

void Api::RequireNotDraining() const {
  if (draining_.load()) throw FromErrorKind(session::ErrorKind::kShuttingDown, "the server is shutting down");
}

std::string Api::Scope(uint64_t tenant, const std::string& id) {
  char prefix[24];
  std::snprintf(prefix, sizeof prefix, "%016llx/", (unsigned long long)tenant);
  return prefix + id;
}

std::string Api::NewId(const char* prefix) {
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lk(mu_);
    a = rng_();
    b = rng_();
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
  return std::string(prefix) + buf;
}

HttpResponse Api::CreateSession(const HttpRequest& request) {
  RequireNotDraining();
  const json body = request.body.empty() ? json::object() : ParseJsonBody(request.body);
  const std::string id = SessionIdOf(body, request);
  std::vector<int32_t> pin;
  double ttl = options_.default_pin_ttl_s;
  if (auto it = body.find("pin_ttl_s"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > kMaxPinTtlSeconds) {
      throw InvalidRequest("pin_ttl_s: expected a number in [0, " + std::to_string(int64_t(kMaxPinTtlSeconds)) +
                               "] (seconds), found " + bridge::JsonPreview(*it),
                           "pin_ttl_s");
    }
    ttl = it->get<double>();
  }
  if (auto it = body.find("messages"); it != body.end() && !it->is_null()) {
    json tools = body.value("tools", json());
    if (!tools.is_null() && !tools.is_array()) throw InvalidRequest("tools: expected an array", "tools");
    if (!it->is_array()) throw InvalidRequest("messages: expected an array, found " + bridge::JsonPreview(*it), "messages");
    if (dsml_) {
      ChatRequest chat;
      chat.messages = bridge::MessagesFromJson(*it);
      pin = RenderChat(body, request.body, chat, Scope(request.tenant, id), false).ids;
    } else {
      try {
        pin = template_->Render(bridge::MessagesFromJson(*it), tools);
      } catch (const bridge::ChatTemplateError& e) {
        throw InvalidRequest(e.what(), e.param());
      }
    }
    if (int64_t(pin.size()) >= manager_.model().config().max_seq_len) {
      throw FromErrorKind(session::ErrorKind::kPromptTooLong,
                          "pinned messages render to " + std::to_string(pin.size()) +
                              " tokens; the model's limit is " + std::to_string(manager_.model().config().max_seq_len));
    }
  }
  std::string sid;
  try {
    // The session belongs to the caller's tenant; its pinned prefix goes into the caller's
    // cache partition (tenant and cache_salt), where its turns look for it.
    const cache::TenantSalt partition = CachePartition(request.tenant, ParseCacheSalt(body));
    sid = WithManager([&](session::SessionManager& m) {
      return m.CreateSession(id, pin, pin.empty() ? 0 : ttl, request.tenant, partition);
    });
  } catch (const session::SessionLimitError& e) {
    throw ApiError(429, "rate_limit_error", "session_limit", e.what());
  } catch (const std::invalid_argument& e) {
    if (std::string_view(e.what()).find("already exists") != std::string_view::npos) {
      throw ApiError(409, "conflict_error", "session_exists", e.what(), "session_id");
    }
    throw InvalidRequest(e.what(), "messages");  // the manager's own words about the pinned prefix
  }
  return JsonResponse(200, {{"id", sid},
                            {"object", "session"},
                            {"created", UnixNow()},
                            {"pinned_tokens", pin.size()},
                            {"pin_ttl_s", pin.empty() ? json(nullptr) : json(ttl)}});
}

HttpResponse Api::GetSession(const HttpRequest& request, const std::string& id) {
  std::optional<session::SessionInfo> info =
      WithManager([&](session::SessionManager& m) { return m.GetSession(id, request.tenant); });
  if (!info) throw FromErrorKind(session::ErrorKind::kSessionNotFound, "unknown session '" + id + "'");
  return JsonResponse(200, SessionJson(*info));
}

HttpResponse Api::DeleteSession(const HttpRequest& request, const std::string& id) {
  using Outcome = session::SessionManager::DeleteOutcome;
  switch (WithManager([&](session::SessionManager& m) { return m.DeleteSession(id, request.tenant); })) {
    case Outcome::kBusy:
      throw FromErrorKind(session::ErrorKind::kSessionBusy, "session '" + id + "' has a turn in flight");
    case Outcome::kNotFound:
      throw FromErrorKind(session::ErrorKind::kSessionNotFound, "unknown session '" + id + "'");
    case Outcome::kDeleted:
      break;
  }
  // Remembered generations are keyed by the exact prompt, so a stale entry can never attach to
  // a different conversation; forgetting here only frees the memory.
  memory_.Forget(Scope(request.tenant, id));
  if (dsml_) dsml_->memory().Forget(Scope(request.tenant, id));
  return JsonResponse(200, {{"id", id}, {"object", "session.deleted"}, {"deleted", true}});
}

HttpResponse Api::ListSessions(const HttpRequest& request) {
  size_t limit = kDefaultListLimit;
  if (auto v = ListQueryParam(request.target, "limit")) {
    const bool digits = !v->empty() && v->size() <= 9 && std::all_of(v->begin(), v->end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    limit = digits ? size_t(std::stoul(*v)) : 0;
    if (limit < 1 || limit > kMaxListLimit) {
      throw InvalidRequest("limit: expected an integer in [1, " + std::to_string(kMaxListLimit) + "]", "limit");
    }
  }
  const std::string after = ListQueryParam(request.target, "after").value_or("");
  const session::SessionPage page = WithManager([&](session::SessionManager& m) { return m.ListSessions(limit, after, request.tenant); });
  json data = json::array();
  for (const session::SessionInfo& s : page.data) data.push_back(SessionJson(s));
  json first = page.data.empty() ? json(nullptr) : json(page.data.front().id);
  json last = page.data.empty() ? json(nullptr) : json(page.data.back().id);
  return JsonResponse(200, {{"object", "list"},
                            {"data", std::move(data)},
                            {"first_id", std::move(first)},
                            {"last_id", std::move(last)},
                            {"has_more", page.has_more}});
}

HttpResponse Api::Models() const {
  const ModelConfig& c = manager_.model().config();
  json model = {{"id", options_.model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "cedar"},
                {"max_model_len", c.max_seq_len},
                {"cedar",
                 {{"dir", manager_.model().dir()},
                  {"device", manager_.device()},          // the backend in use: cpu or cuda
                  {"device_detail", manager_.device_detail()},
                  {"vocab_size", c.vocab_size},
                  {"chat_format", std::string(bridge::ChatFormatName(format_))},
                  {"n_layers", c.n_layers},
                  {"n_encoder_layers", c.n_encoder_layers},
                  {"window", c.window},
                  {"max_seq_len", c.max_seq_len}}}};
  return JsonResponse(200, {{"object", "list"}, {"data", json::array({model})}});
}

HttpResponse Api::Health() const {
  if (draining_.load()) return JsonResponse(503, {{"status", "draining"}});
  return JsonResponse(200, {{"status", "ok"}, {"model", options_.model_name}, {"device", manager_.device()}});
}

HttpResponse Api::Metrics() {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render(WithManager([](session::SessionManager& m) { return m.Metrics(); }));
  return r;
}

HttpResponse Api::Cache() {
  const session::EngineMetrics e = WithManager([](session::SessionManager& m) { return m.Metrics(); });
  return JsonResponse(
      200, {{"object", "cache"},
            {"ram", {{"used_bytes", e.ram_bytes}, {"budget_bytes", e.ram_budget}}},
            {"disk", {{"used_bytes", e.disk_bytes}, {"budget_bytes", e.disk_budget}}},
            {"hit_tokens",
             {{"live", e.hit_tokens_live}, {"ram", e.hit_tokens_ram}, {"disk", e.hit_tokens_disk}, {"remote", e.hit_tokens_remote}}},
            {"remote",
             e.remote_enabled ? nlohmann::json{{"connected", e.remote.connected},
                                               {"reads", e.remote.reads},
                                               {"page_hits", e.remote.page_hits},
                                               {"page_misses", e.remote.page_misses},
                                               {"snapshot_hits", e.remote.snapshot_hits},
                                               {"corrupt", e.remote.corrupt},
                                               {"timeouts", e.remote.timeouts},
                                               {"errors", e.remote.errors},
                                               {"skipped", e.remote.skipped},
                                               {"outages", e.remote.outages},
                                               {"pages_written", e.remote.pages_written},
                                               {"snapshots_written", e.remote.snapshots_written},
                                               {"write_failures", e.remote.write_failures},
                                               {"writes_dropped", e.remote.writes_dropped}}
                              : nlohmann::json(nullptr)},
            {"evictions",
             {{"snapshots_dropped", e.snapshots_dropped},
              {"pages_spilled", e.pages_spilled},
              {"disk_entries_deleted", e.disk_entries_deleted}}},
            {"corrupt_entries", e.corrupt_entries},
            {"encoder_replays", e.encoder_replays},
            {"exact_restores", e.exact_restores},
            {"decoder_replays", e.decoder_replays},
            {"sessions", e.sessions},
            {"session_memory",
             {{"live_state_bytes", e.live_state_bytes},
              {"pinned_bytes", e.session_pinned_bytes},
              {"budget_bytes", e.session_ram_budget},
              {"live_sessions", e.live_sessions},
              {"max_sessions", e.max_sessions},
              {"demoted", e.sessions_demoted}}},
            {"inserts_partial", e.cache_inserts_partial},
            {"insert_refused_tokens", e.cache_insert_refused_tokens},
            {"remembered_turns", dsml_ ? dsml_->memory().entries() : memory_.entries()},
            {"page_tokens", e.page_tokens},
            {"policies",
             {{"restore", RestorePolicyName(options_.restore_policy)},
              {"decoder", DecoderPolicyName(options_.decoder_policy)}}}});
}

}  // namespace cedar::server
