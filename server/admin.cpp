// Api: the utility endpoints (issue 19), in llama.cpp's names and shapes where it has them:
//
//   POST /tokenize          {"content", "add_special"?, "parse_special"?, "with_pieces"?} -> {"tokens"}
//   POST /detokenize        {"tokens": [ids]} -> {"content"}
//   POST /apply-template    a chat body ({"messages", "tools"?, ...}) -> {"prompt"}: the text of
//                           the generation prompt /v1/chat/completions would run (specials by name)
//   POST /v1/cache/flush    {"cache_salt"?}: drops the caller's tenant's unpinned cache entries
//   GET  /version           {"version", "git", "model"}
#include <spdlog/spdlog.h>

#include "server/version.h"
#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/utf8.h"

#include "server/api.h"
#include "server/api_error.h"
#include "server/request_parse.h"
#include "server/tenant.h"

namespace cedar::server {

using nlohmann::json;

namespace {

bool BoolField(const json& body, const char* key, bool fallback) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InvalidRequest(std::string(key) + ": expected a boolean, found " + bridge::JsonPreview(*it), key);
  return it->get<bool>();
}

// The id a prompt starts with, when the tokenizer has one (Cedar's <|bos|>, DeepSeek's BOS).
std::optional<int32_t> BosId(const bridge::Tokenizer& t) {
  for (std::string_view name : {bridge::kBosToken, std::string_view("<｜begin▁of▁sentence｜>")})
    if (auto id = t.FindSpecial(name)) return *id;
  return std::nullopt;
}

}  // namespace

HttpResponse Api::Admin(const HttpRequest& request, const std::string& path) {
  const std::string& m = request.method;
  if (path == "/version") {
    if (m != "GET") throw ApiError(405, "invalid_request_error", "method_not_allowed", "GET /version only");
    return JsonResponse(200, {{"version", kCedarVersion}, {"git", kCedarGitDescribe}, {"model", options_.model_name}});
  }
  if (m != "POST") throw ApiError(405, "invalid_request_error", "method_not_allowed", m + " " + path + ": POST only");
  const json body = request.body.empty() ? json::object() : ParseJsonBody(request.body);
  if (path == "/tokenize") {
    auto it = body.find("content");
    if (it == body.end() || !it->is_string())
      throw InvalidRequest("content: expected a string, found " + (it == body.end() ? std::string("nothing") : bridge::JsonPreview(*it)),
                           "content");
    const std::string& text = it->get_ref<const std::string&>();
    std::vector<int32_t> ids;
    if (BoolField(body, "add_special", false))
      if (auto bos = BosId(tokenizer_)) ids.push_back(*bos);
    const auto enc = BoolField(body, "parse_special", true) ? tokenizer_.EncodeWithSpecials(text) : tokenizer_.Encode(text);
    ids.insert(ids.end(), enc.begin(), enc.end());
    if (!BoolField(body, "with_pieces", false)) return JsonResponse(200, {{"tokens", ids}});
    json tokens = json::array();
    for (int32_t id : ids) {
      // A piece that is not whole UTF-8 goes as its bytes (as llama.cpp does).
      std::string piece = tokenizer_.IsSpecial(id) ? std::string(*tokenizer_.SpecialName(id)) : std::string(tokenizer_.TokenBytes(id));
      json shown = piece;
      if (bridge::RepairUtf8(piece) != piece) {
        shown = json::array();
        for (unsigned char c : piece) shown.push_back(int(c));
      }
      tokens.push_back({{"id", id}, {"piece", shown}});
    }
    return JsonResponse(200, {{"tokens", tokens}});
  }
  if (path == "/detokenize") {
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) throw InvalidRequest("tokens: expected an array of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const json& v : *it) {
      if (!v.is_number_integer() || !tokenizer_.InVocab(int32_t(std::clamp<int64_t>(v.get<int64_t>(), -1, INT32_MAX))))
        throw InvalidRequest("tokens: expected ids in [0, " + std::to_string(tokenizer_.vocab_size()) + "), found " +
                                 bridge::JsonPreview(v),
                             "tokens");
      ids.push_back(int32_t(v.get<int64_t>()));
    }
    return JsonResponse(200, {{"content", tokenizer_.Decode(ids, bridge::SpecialText::kName)}});
  }
  if (path == "/apply-template") {
    ChatRequest chat = ParseChatRequest(body, request);
    const std::vector<int32_t> ids = RenderChat(body, request.body, chat, Scope(request.tenant, chat.params.session_id), false).ids;
    return JsonResponse(200, {{"prompt", tokenizer_.Decode(ids, bridge::SpecialText::kName)}, {"tokens", ids.size()}});
  }
  if (path == "/v1/cache/flush") {
    // Only the caller's partition: its tenant (the API key's hash) with the named cache_salt.
    const cache::TenantSalt partition = CachePartition(request.tenant, ParseCacheSalt(body));
    const size_t dropped = WithManager([&](session::SessionManager& mgr) { return mgr.FlushCachePartition(partition); });
    spdlog::info("cache flush: tenant {:016x} dropped {} cached tokens", request.tenant, dropped);
    return JsonResponse(200, {{"object", "cache.flush"}, {"dropped_tokens", dropped}});
  }
  throw ApiError(404, "not_found_error", "unknown_route", "no route for " + bridge::Clip(m, 20) + " " + bridge::Clip(path, 100));
}

}  // namespace cedar::server
