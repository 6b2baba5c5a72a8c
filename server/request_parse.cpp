#include "server/request_parse.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "tools_bridge/lib/json_limits.h"
#include "tools_bridge/lib/openai_json.h"
#include "server/api_error.h"
#include "server/session_ids.h"

namespace cedar::server {
namespace {

using nlohmann::json;

// A client value in an error message: bounded in length and in recursion, whatever its size.
std::string Shown(const json& v) { return bridge::JsonPreview(v, 60); }

[[noreturn]] void Expected(const std::string& field, const std::string& what, const json& found) {
  throw InvalidRequest(field + ": expected " + what + ", found " + Shown(found), field);
}

const json* Find(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool ReadBool(const json& body, const char* key, bool fallback) {
  const json* v = Find(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) Expected(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> ReadNumber(const json& body, const char* key, double lo, double hi, bool lo_open,
                                 const char* range) {
  const json* v = Find(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) Expected(key, std::string("a number in ") + range, *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    Expected(key, std::string("a number in ") + range, *v);
  }
  return x;
}

std::optional<int64_t> ReadInt(const json& body, const char* key) {
  const json* v = Find(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) Expected(key, "an integer", *v);
  return v->get<int64_t>();
}

std::vector<std::string> ReadStop(const json& body) {
  const json* v = Find(body, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) Expected("stop", "a string or an array of strings", *v);
      out.push_back(s.get<std::string>());
    }
  } else {
    Expected("stop", "a string or an array of strings", *v);
  }
  if (out.size() > kMaxStopStrings) {
    throw InvalidRequest("stop: at most " + std::to_string(kMaxStopStrings) + " strings", "stop");
  }
  for (const std::string& s : out) {
    if (s.empty()) throw InvalidRequest("stop: strings must not be empty", "stop");
    if (s.size() > kMaxStopStringBytes) {
      throw InvalidRequest("stop: a string is " + std::to_string(s.size()) + " bytes; at most " +
                               std::to_string(kMaxStopStringBytes),
                           "stop");
    }
  }
  return out;
}

// logit_bias: {"<token id>": bias}, bias in [-100, 100] (OpenAI's range).
std::vector<std::pair<int32_t, float>> ReadLogitBias(const json& body) {
  std::vector<std::pair<int32_t, float>> out;
  const json* v = Find(body, "logit_bias");
  if (!v) return out;
  if (!v->is_object()) Expected("logit_bias", "an object mapping token ids to numbers in [-100, 100]", *v);
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id < 0)
      throw InvalidRequest("logit_bias: expected token ids as keys, found \"" + bridge::Clip(key, 40) + "\"", "logit_bias");
    const json& b = it.value();
    if (!b.is_number() || !std::isfinite(b.get<double>()) || b.get<double>() < -100 || b.get<double>() > 100)
      throw InvalidRequest("logit_bias: expected a number in [-100, 100] for token " + key + ", found " + Shown(b),
                           "logit_bias");
    out.emplace_back(int32_t(id), float(b.get<double>()));
  }
  return out;
}

// Fields OpenAI defines that Cedar does not implement: 400 naming the field when present with
// anything but its default (docs/SERVER.md "Request fields").
void RefuseUnsupported(const json& body, bool chat) {
  auto refuse = [](const char* field, const std::string& why) {
    throw InvalidRequest(std::string(field) + ": " + why, field, "unsupported_field");
  };
  if (auto n = ReadInt(body, "n"); n && *n != 1) refuse("n", "only n = 1 is supported");
  if (chat) {
    for (const char* f : {"audio", "prediction", "web_search_options", "functions", "function_call"})
      if (Find(body, f)) refuse(f, "not supported by this server");
    if (const json* m = Find(body, "modalities"); m && *m != json::array({"text"}))
      refuse("modalities", "only [\"text\"] is supported");
  } else {
    if (const json* e = Find(body, "echo"); e && !(e->is_boolean() && !e->get<bool>()))
      refuse("echo", "not supported (only false)");
    if (const json* sfx = Find(body, "suffix"); sfx && !(sfx->is_string() && sfx->get<std::string>().empty()))
      refuse("suffix", "not supported (only \"\")");
    if (auto b = ReadInt(body, "best_of"); b && *b != 1) refuse("best_of", "only best_of = 1 is supported");
  }
}

GenerationParams ReadParams(const json& body, const HttpRequest& request) {
  GenerationParams p;
  if (const json* v = Find(body, "model")) {
    if (!v->is_string()) Expected("model", "a string", *v);
    p.model = v->get<std::string>();
    // Echoed in every response and stream chunk: a long name would multiply the output.
    if (p.model.size() > kMaxModelNameBytes) {
      throw InvalidRequest("model: the name is " + std::to_string(p.model.size()) + " bytes; at most " +
                               std::to_string(kMaxModelNameBytes),
                           "model");
    }
  }
  p.session_id = SessionIdOf(body, request);
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    if (auto n = ReadInt(body, key)) {
      if (*n < 0 || *n > std::numeric_limits<int>::max()) Expected(key, "an integer >= 0", body[key]);
      if (!p.max_tokens) p.max_tokens = int(*n);
    }
  }
  if (auto t = ReadNumber(body, "temperature", 0, 2, false, "[0, 2]")) p.sampling.temperature = float(*t);
  if (auto t = ReadNumber(body, "top_p", 0, 1, true, "(0, 1]")) p.sampling.top_p = float(*t);
  // seed: any integer in [0, 2^64); -1 draws one, as llama.cpp's server reads it (its default).
  // Other negatives are refused rather than wrapped into a seed above 2^63 that cedar.seed would
  // then report as a different number than the client sent.
  if (const json* v = Find(body, "seed")) {
    const bool negative = v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0;
    if (!v->is_number_integer() || (negative && v->get<int64_t>() != -1))
      Expected("seed", "an integer in [0, 2^64), or -1 to draw one", *v);
    if (!negative) p.sampling.seed = v->get<uint64_t>(), p.seeded = true;
  }
  p.adjust.bias = ReadLogitBias(body);
  if (auto x = ReadNumber(body, "presence_penalty", -2, 2, false, "[-2, 2]")) p.adjust.presence_penalty = float(*x);
  if (auto x = ReadNumber(body, "frequency_penalty", -2, 2, false, "[-2, 2]")) p.adjust.frequency_penalty = float(*x);
  if (auto pr = ReadInt(body, "priority")) {
    if (*pr < -1000000 || *pr > 1000000) Expected("priority", "an integer in [-1000000, 1000000]", body["priority"]);
    p.priority = int(*pr);
  }
  p.stop = ReadStop(body);
  p.stream = ReadBool(body, "stream", false);
  p.ignore_eos = ReadBool(body, "ignore_eos", false);
  if (const json* so = Find(body, "stream_options")) {
    if (!so->is_object()) Expected("stream_options", "an object", *so);
    const json* usage = Find(*so, "include_usage");
    if (usage && !usage->is_boolean()) Expected("stream_options", "include_usage to be a boolean", *usage);
    p.include_usage = usage && usage->get<bool>();
  }
  return p;
}

void CheckToolChoice(const json& choice, const json& tools) {
  if (choice.is_null()) return;
  if (choice.is_string()) {
    const std::string& c = choice.get_ref<const std::string&>();
    if (c != "none" && c != "auto" && c != "required") {
      Expected("tool_choice", "\"none\", \"auto\", \"required\" or {\"type\":\"function\",...}", choice);
    }
    if (c == "required" && (!tools.is_array() || tools.empty())) {
      throw InvalidRequest("tool_choice: \"required\" needs a non-empty tools array", "tool_choice");
    }
    return;
  }
  const json* fn = choice.is_object() ? Find(choice, "function") : nullptr;
  const json* name = fn && fn->is_object() ? Find(*fn, "name") : nullptr;
  if (!name || !name->is_string()) {
    Expected("tool_choice", "\"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}",
             choice);
  }
  if (tools.is_array()) {
    for (const json& t : tools) {
      if (t.is_object() && t.contains("function") && t["function"].is_object() &&
          t["function"].value("name", json()) == *name) {
        return;
      }
    }
  }
  throw InvalidRequest("tool_choice: no tool named " + Shown(*name) + " in tools", "tool_choice");
}

}  // namespace

json ParseJsonBody(const std::string& body) {
  bridge::JsonParseResult parsed = bridge::ParseJsonBounded(body, bridge::kMaxJsonDepth);
  if (parsed.error) {
    const bridge::JsonParseError& e = *parsed.error;
    const std::string param = bridge::Clip(e.top_key, 64);
    switch (e.kind) {
      case bridge::JsonParseError::Kind::kTooDeep:
        throw InvalidRequest("JSON body: " + e.message + "; at most " + std::to_string(bridge::kMaxJsonDepth) +
                                 " levels of nesting are accepted",
                             param, "json_too_deep");
      case bridge::JsonParseError::Kind::kNumberOutOfRange:
        throw InvalidRequest("JSON body: " + e.message, param, "number_out_of_range");
      case bridge::JsonParseError::Kind::kSyntax:
        break;
    }
    throw InvalidRequest("invalid JSON body: " + e.message, param, "invalid_json");
  }
  if (!parsed.value.is_object()) {
    throw InvalidRequest("the body must be a JSON object, found " + Shown(parsed.value));
  }
  return std::move(parsed.value);
}

std::string SessionIdOf(const json& body, const HttpRequest& request) {
  std::string id;
  if (const json* v = Find(body, "session_id")) {
    if (!v->is_string()) Expected("session_id", "a string", *v);
    id = v->get<std::string>();
    CheckSessionId(id, "session_id");
  }
  if (const std::string* h = request.Header("x-session-id"); h && !h->empty()) {
    CheckSessionId(*h, "header X-Session-Id");
    if (!id.empty() && id != *h) {
      throw InvalidRequest("session_id \"" + id + "\" and header X-Session-Id \"" + *h + "\" differ", "session_id");
    }
    id = *h;
  }
  return id;
}

ChatRequest ParseChatRequest(const json& body, const HttpRequest& request) {
  ChatRequest r;
  RefuseUnsupported(body, true);
  r.params = ReadParams(body, request);
  if (ReadBool(body, "logprobs", false)) r.params.top_logprobs = 0;
  if (auto k = ReadInt(body, "top_logprobs")) {
    if (*k < 0 || *k > kMaxTopLogprobs) Expected("top_logprobs", "an integer in [0, 20]", body["top_logprobs"]);
    if (r.params.top_logprobs < 0) throw InvalidRequest("top_logprobs: needs \"logprobs\": true", "top_logprobs");
    r.params.top_logprobs = int(*k);
  }
  if (ReadBool(body, "return_token_ids", false))
    throw InvalidRequest("return_token_ids: only /v1/completions returns token ids", "return_token_ids", "unsupported_field");
  const json* messages = Find(body, "messages");
  if (!messages) throw InvalidRequest("messages: required", "messages");
  if (!messages->is_array() || messages->empty()) Expected("messages", "a non-empty array", *messages);
  try {
    r.messages = bridge::MessagesFromJson(*messages);
  } catch (const bridge::ChatTemplateError& e) {
    throw InvalidRequest(e.what(), e.param());
  }
  if (const json* tools = Find(body, "tools")) {
    if (!tools->is_array()) Expected("tools", "an array", *tools);
    r.tools = *tools;
  }
  if (const json* choice = Find(body, "tool_choice")) r.tool_choice = *choice;
  CheckToolChoice(r.tool_choice, r.tools);
  return r;
}

CompletionRequest ParseCompletionRequest(const json& body, const HttpRequest& request) {
  CompletionRequest r;
  RefuseUnsupported(body, false);
  r.params = ReadParams(body, request);
  if (const json* lp = Find(body, "logprobs")) {
    if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > kMaxTopLogprobs)
      Expected("logprobs", "an integer in [0, 20] (alternatives per token)", *lp);
    r.params.top_logprobs = int(lp->get<int64_t>());
  }
  r.params.return_token_ids = ReadBool(body, "return_token_ids", false);
  const json* p = Find(body, "prompt");
  if (!p) throw InvalidRequest("prompt: required", "prompt");
  const json* v = p;
  // [ "text" ] and [ [ids] ] (a batch of one) read as "text" and [ids].
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) v = &(*p)[0];
  if (v->is_string()) {
    r.prompt_text = v->get<std::string>();
    if (r.prompt_text->empty()) throw InvalidRequest("prompt: must not be empty", "prompt");
    return r;
  }
  if (!v->is_array() || v->empty()) Expected("prompt", "a string or a non-empty array of token ids", *p);
  for (const json& id : *v) {
    if (!id.is_number_integer()) Expected("prompt", "a string or a non-empty array of token ids", *p);
    const int64_t x = id.get<int64_t>();
    if (x < 0 || x > std::numeric_limits<int32_t>::max()) {
      throw InvalidRequest("prompt: token id " + std::to_string(x) + " is out of range", "prompt");
    }
    r.prompt_ids.push_back(int32_t(x));
  }
  return r;
}

}  // namespace cedar::server
