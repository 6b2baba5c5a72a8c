// Serving a model in the released DeepSeek-V4.1 chat format (config.json "chat_format":
// "deepseek_v41", the released tokenizer with the V4.1 added tokens, vocab 129,280): prompts
// are the released encoder's text tokenized by the BPE tokenizer, and the model's own turns
// sent back by the client are replayed as the exact ids it sampled (server/dsml_replay.h).
// Random weights: the outputs are noise, which is the hard case for replay (a random id
// sequence is rarely the canonical tokenization of its own text).
// Skips (with a message) when npm has not installed the tokenizer files.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/tenant.h"
#include "session/session_manager.h"
#include "tests/test_models.h"
#include "tests/tokenizer_fixtures.h"
#include "tools_bridge/lib/bpe_tokenizer.h"

using namespace cedar;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

struct V41Server {
  std::shared_ptr<const bridge::Tokenizer> tok;
  std::shared_ptr<const Model> model;
  std::unique_ptr<session::SessionManager> manager;
  std::unique_ptr<server::Api> api;

  static std::unique_ptr<V41Server> Make() {
    if (testing::DeepSeekV3TokenizerDir().empty()) return nullptr;
    auto s = std::make_unique<V41Server>();
    // Loaded once per process (about a second): the test cases share it.
    static std::shared_ptr<const bridge::Tokenizer> shared_tok = [] {
      bridge::BpeTokenizerOptions bo;
      bo.vocab_size = 129280;
      return std::shared_ptr<const bridge::Tokenizer>(
          bridge::BpeTokenizer::FromDir(testing::MakeDeepSeekV41TokenizerDir(CEDAR_BINARY_DIR "/server_dsml_test"), bo));
    }();
    s->tok = shared_tok;
    ModelConfig c;
    REQUIRE(PresetConfig("tiny", &c));
    c.vocab_size = 129280;
    c.chat_format = "deepseek_v41";
    static std::shared_ptr<const Model> shared = test::MakeModel(c, 7);
    s->model = shared;
    s->manager = session::SessionManager::Start(s->model, {});
    server::ApiOptions ao;
    ao.tokenizer = s->tok;
    s->api = std::make_unique<server::Api>(*s->manager, ao);
    return s;
  }
  ~V41Server() {
    api.reset();
    if (manager) manager->Shutdown(true);
  }
  json Post(const std::string& target, const std::string& body) {
    server::HttpRequest r;
    r.method = "POST";
    r.target = target;
    r.body = body;
    server::HttpResponse res = api->Handle(r);
    if (res.stream) {
      if (res.complete) res.complete();
      std::string all;
      while (res.stream->Pull(&all)) {
      }
      res.body = std::move(all);
    }
    INFO(res.body);
    REQUIRE(res.status == 200);
    if (!res.body.starts_with("data: ")) return json::parse(res.body);
    // A stream: assemble the message and keep the usage chunk's usage.
    json msg = {{"role", "assistant"}, {"content", ""}};
    json out;
    std::istringstream in(res.body);
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("data: {")) continue;
      const json ev = json::parse(line.substr(6));
      if (ev.contains("usage")) out["usage"] = ev["usage"];
      if (!ev.contains("choices") || ev["choices"].empty()) continue;
      const json& d = ev["choices"][0]["delta"];
      if (d.contains("content") && d["content"].is_string()) msg["content"] = msg["content"].get<std::string>() + d["content"].get<std::string>();
      if (d.contains("reasoning_content")) {
        msg["reasoning_content"] = msg.value("reasoning_content", std::string()) + d["reasoning_content"].get<std::string>();
      }
      if (d.contains("tool_calls")) {
        for (const json& tc : d["tool_calls"]) {
          const size_t i = tc["index"].get<size_t>();
          if (!msg.contains("tool_calls")) msg["tool_calls"] = json::array();
          if (msg["tool_calls"].size() <= i) {
            msg["tool_calls"].push_back({{"id", tc["id"]}, {"type", "function"},
                                         {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
          }
          if (tc["function"].contains("arguments")) {
            json& a = msg["tool_calls"][i]["function"]["arguments"];
            a = a.get<std::string>() + tc["function"]["arguments"].get<std::string>();
          }
        }
      }
    }
    out["choices"] = json::array({{{"message", msg}}});
    return out;
  }
};

}  // namespace

TEST_CASE("deepseek_v41 needs the BPE tokenizer: a byte tokenizer is refused with a clear message") {
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));
  c.chat_format = "deepseek_v41";
  std::shared_ptr<const Model> model = test::MakeModel(c, 2);
  auto manager = session::SessionManager::Start(model, {});
  CHECK_THROWS_WITH_AS(server::Api(*manager, {}), doctest::Contains("needs the released BPE tokenizer"),
                       std::invalid_argument);
  manager->Shutdown(true);
}

TEST_CASE("deepseek_v41: vision is out of scope, an image in a prompt gets a clear 400") {
  auto s = V41Server::Make();
  if (!s) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  auto raw = [&](const std::string& target, const json& body) {
    server::HttpRequest r;
    r.method = "POST";
    r.target = target;
    r.body = body.dump();
    return s->api->Handle(r);
  };
  // An OpenAI image content part.
  json body = {{"model", "cedar"}, {"max_tokens", 2},
               {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "what is this?"}},
                                                           {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}}}}}}};
  server::HttpResponse res = raw("/v1/chat/completions", body);
  INFO(res.body);
  CHECK(res.status == 400);
  CHECK(res.body.find("messages[0].content[1]") != std::string::npos);
  CHECK(res.body.find("vision is out of scope") != std::string::npos);
  // The released image token typed into a message (the encoder's text is tokenized with the
  // added tokens, so it becomes id 129264).
  body["messages"] = {{{"role", "user"}, {"content", "look: <｜deepseek_image｜>"}}};
  res = raw("/v1/chat/completions", body);
  INFO(res.body);
  CHECK(res.status == 400);
  CHECK(res.body.find("<｜deepseek_image｜> (id 129264)") != std::string::npos);
  CHECK(res.body.find("\"param\":\"messages\"") != std::string::npos);
  // As a token id of a completion prompt, and another image token (<｜rl_image_pad｜>, 129262).
  for (int id : {129264, 129262}) {
    res = raw("/v1/completions", {{"model", "cedar"}, {"max_tokens", 2}, {"prompt", {0, 100, id}}});
    INFO(res.body);
    CHECK(res.status == 400);
    CHECK(res.body.find("(id " + std::to_string(id) + ")") != std::string::npos);
    CHECK(res.body.find("\"param\":\"prompt\"") != std::string::npos);
  }
  // Without the image the same request is served.
  body["messages"] = {{{"role", "user"}, {"content", "look: an image"}}};
  CHECK(raw("/v1/chat/completions", body).status == 200);
}

TEST_CASE("deepseek_v41 prompts are BPE(EncodeWithSpecials(the released encoder's text))") {
  auto s = V41Server::Make();
  if (!s) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  CHECK(s->api->chat_template() == nullptr);
  std::ifstream in(std::string(CEDAR_SOURCE_DIR) + "/tests/data/dsml/encoder_vectors.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const ojson data = ojson::parse(ss.str());
  int compared = 0;
  for (const ojson& c : data.at("cases")) {
    const ojson& msgs = c.at("messages");
    const std::string last = msgs.back().value("role", "");
    // The server always renders with drop_thinking's default and a generation prompt.
    if (c.contains("drop_thinking") || (last != "user" && last != "tool")) continue;
    ojson body = {{"messages", msgs}, {"thinking", c.at("thinking")}};
    if (c.contains("tools")) body["tools"] = c["tools"];
    if (c.contains("reasoning_effort")) body["reasoning_effort"] = c["reasoning_effort"];
    CAPTURE(c.at("name").get<std::string>());
    const std::vector<int32_t> ids = s->api->ChatPromptIds(body.dump());
    CHECK(ids == s->tok->EncodeWithSpecials(c.at("expected").get<std::string>()));
    compared++;
  }
  MESSAGE("encoder vectors compared: " << compared);
  // Bad encoder settings are 400s naming the field.
  for (const auto& [bad, param] : std::vector<std::pair<json, std::string>>{
           {{{"thinking", "yes"}}, "thinking"}, {{{"reasoning_effort", "medium"}}, "reasoning_effort"},
           {{{"chat_template_kwargs", {{"reasoning_effort", 0}}}}, "chat_template_kwargs.reasoning_effort"}}) {
    json body = bad;
    body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    const server::HttpResponse r = s->api->Handle({"POST", "/v1/chat/completions", {}, body.dump()});
    CAPTURE(r.body);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == param);
  }
  CHECK(compared >= 5);
}

TEST_CASE("deepseek_v41: a tool call sent back with re-serialised arguments replays the sampled ids") {
  auto s = V41Server::Make();
  if (!s) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  const bridge::Tokenizer& tok = *s->tok;
  server::DsmlPrompter prompter(tok, 16);
  std::vector<bridge::Message> msgs(2);
  msgs[0].role = bridge::Role::kSystem;
  msgs[0].content = "You are a helpful agent.";
  msgs[1].content = "What is the weather in Oslo?";
  const ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}])");
  const server::DsmlPrompt p0 = prompter.Render("s", msgs, tools, {});
  CHECK(p0.exact == 0);
  // What the model "sampled": the canonical DSML text, tokenized one character at a time (a
  // non-canonical id sequence with the same text), then the end-of-sentence id.
  bridge::Message call;
  call.role = bridge::Role::kAssistant;
  call.tool_calls = {{"call_abc_0", "weather", R"({"city":"Oslo","days":2})"}};
  const std::string raw = "\n\n" + bridge::dsml::RenderCalls(call.tool_calls);
  std::vector<int32_t> sampled;
  for (size_t i = 0; i < raw.size();) {
    size_t n = 1;
    while (i + n < raw.size() && (uint8_t(raw[i + n]) & 0xC0) == 0x80) n++;
    for (int32_t id : tok.EncodeWithSpecials(raw.substr(i, n))) sampled.push_back(id);
    i += n;
  }
  REQUIRE(sampled != tok.EncodeWithSpecials(raw));
  std::vector<int32_t> output = sampled;
  output.push_back(prompter.eos_id());
  prompter.Remember("s", p0, call, output);

  bridge::Message result;
  result.role = bridge::Role::kTool;
  result.tool_call_id = "call_abc_0";
  result.content = "sunny, 21°C";
  // The client re-serialised the arguments (spaces, key order): still the same call.
  bridge::Message back = call;
  back.tool_calls[0].arguments = R"({ "days": 2, "city": "Oslo" })";
  std::vector<bridge::Message> next = msgs;
  next.push_back(back);
  next.push_back(result);
  const server::DsmlPrompt p1 = prompter.Render("s", next, tools, {});
  CHECK(p1.exact == 1);
  CHECK(p1.canonical == 0);
  std::vector<int32_t> want = p0.ids;
  want.insert(want.end(), output.begin(), output.end());
  REQUIRE(p1.ids.size() > want.size());
  CHECK(std::vector<int32_t>(p1.ids.begin(), p1.ids.begin() + ptrdiff_t(want.size())) == want);

  // Changed arguments, another call id, or another scope: canonical.
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<bridge::Message> edited = next;
    if (variant == 0) edited[2].tool_calls[0].arguments = R"({"city":"Bergen","days":2})";
    if (variant == 1) edited[2].tool_calls[0].id = "call_other";
    const server::DsmlPrompt pe = prompter.Render(variant == 2 ? "t" : "s", edited, tools, {});
    CHECK(pe.exact == 0);
    CHECK(pe.canonical == 1);
  }
  // The same message after a different context: canonical.
  std::vector<bridge::Message> other = next;
  other[1].content = "What is the weather in Bergen?";
  CHECK(prompter.Render("s", other, tools, {}).exact == 0);
}

namespace {

// `turns` turns of an agent on a fresh session; thinking: the prompts end with "<think>", the
// noise the model writes is reasoning_content, and the client sends it back.
void AgentLoop(V41Server* s, bool thinking, int turns) {
  CAPTURE(thinking);
  server::Api& api = *s->api;
  const std::string sid = json::parse(api.Handle({"POST", "/v1/sessions", {}, "{}"}).body)["id"];
  // Key order as a client wrote it ("function" before "type"): part of the prompt bytes.
  const ojson tools = ojson::parse(R"([
    {"function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}}, "required": ["path"]}}, "type": "function"},
    {"type": "function", "function": {"name": "run", "parameters": {"type": "object",
      "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}}}}}])");
  ojson messages = ojson::array({{{"role", "system"}, {"content", "You are a coding agent."}},
                                 {{"role", "user"}, {"content", "Fix the failing test in src/parse.cpp."}}});
  std::vector<int32_t> prev_prompt, prev_ids;
  int64_t prev_completion = 0;
  bool prev_verbatim = false;
  int verbatim_msgs = 0, scripted_msgs = 0, reasoned = 0;
  for (int t = 0; t < turns; ++t) {
    CAPTURE(t);
    ojson body = {{"model", "v41-tiny"}, {"messages", messages}, {"tools", tools}, {"session_id", sid}, {"thinking", thinking},
                  {"max_tokens", 6 + (t * 7) % 11}, {"temperature", 1.0}, {"seed", 100 + t}};
    if (t % 3 == 1) body["stream"] = true, body["stream_options"] = {{"include_usage", true}};
    const std::vector<int32_t> prompt = api.ChatPromptIds(body.dump());
    const server::ServerMetrics::Totals before = api.metrics().totals();
    const json r = s->Post("/v1/chat/completions", body.dump());
    const server::ServerMetrics::Totals after = api.metrics().totals();
    CHECK(after.replay_exact - before.replay_exact == verbatim_msgs);
    CHECK(after.replay_canonical - before.replay_canonical == scripted_msgs);
    const int64_t prompt_tokens = r["usage"]["prompt_tokens"];
    const int64_t cached = r["usage"]["prompt_tokens_details"]["cached_tokens"];
    const int64_t completion = r["usage"]["completion_tokens"];
    CHECK(prompt_tokens == int64_t(prompt.size()));
    if (t > 0) {
      REQUIRE(prompt.size() > prev_prompt.size());
      CHECK(std::equal(prev_prompt.begin(), prev_prompt.end(), prompt.begin()));
      if (prev_verbatim) {
        // The previous output's ids follow its prompt exactly (the EOS id too when it stopped).
        std::vector<int32_t> want = prev_prompt;
        want.insert(want.end(), prev_ids.begin(), prev_ids.end());
        want.push_back(s->tok->FindSpecial(bridge::dsml::kEos).value());
        REQUIRE(prompt.size() >= want.size());
        CHECK(std::equal(want.begin(), want.end(), prompt.begin()));
        CHECK(int64_t(want.size()) >= int64_t(prev_prompt.size()) + prev_completion);
        CHECK(cached >= int64_t(prev_prompt.size()) + prev_completion - 16);
      } else {
        CHECK(cached >= int64_t(prev_prompt.size()) - 16);
      }
    }
    prev_prompt = prompt;
    prev_completion = completion;
    // What this turn sampled (without the end-of-sentence id), as the server remembered it.
    const auto remembered = api.dsml()->memory().Entries(server::Api::Scope(server::kOwnerTenant, sid));
    REQUIRE(!remembered.empty());
    prev_ids = remembered.front()->ids;
    CHECK(int64_t(prev_ids.size()) >= completion - 1);
    ojson msg = ojson::parse(r["choices"][0]["message"].dump());
    reasoned += msg.contains("reasoning_content") && !msg["reasoning_content"].get<std::string>().empty();
    if (t % 4 == 3 || t == 10) {
      // The agent replaces the model's turn: a scripted tool call (or, at t == 10, an edit),
      // rendered canonically.
      if (t == 10) {
        msg["content"] = msg["content"].is_string() ? msg["content"].get<std::string>() + " (edited)" : "(edited)";
        messages.push_back(msg);
        messages.push_back({{"role", "user"}, {"content", "Go on."}});
      } else {
        const std::string id = "call_script_" + std::to_string(t);
        messages.push_back({{"role", "assistant"}, {"content", ""},
                            {"tool_calls", {{{"id", id}, {"type", "function"},
                                             {"function", {{"name", "read_file"},
                                                           {"arguments", "{\"path\": \"src/f" + std::to_string(t) + ".cpp\"}"}}}}}}});
        std::string result;
        for (int i = 0; i < (t * 97) % 40; ++i) result += "line " + std::to_string(i) + ": int x = parse(\"é\");\n";
        messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
      }
      scripted_msgs++;
      prev_verbatim = false;
    } else {
      messages.push_back(msg);  // verbatim, as the client received it
      verbatim_msgs++;
      if (msg.contains("tool_calls")) {
        for (const ojson& tc : msg["tool_calls"]) {
          messages.push_back({{"role", "tool"}, {"tool_call_id", tc["id"]}, {"content", "ok"}});
        }
      } else {
        messages.push_back({{"role", "user"}, {"content", "Next step " + std::to_string(t) + "."}});
      }
      prev_verbatim = true;
    }
  }
  const std::string metrics = api.Handle({"GET", "/metrics", {}, ""}).body;
  CHECK(metrics.find("cedar_replay_exact_total") != std::string::npos);
  CHECK(metrics.find("cedar_replay_canonical_total") != std::string::npos);
  CHECK((reasoned > 0) == thinking);  // thinking mode: the noise is reasoning until a </think>
  MESSAGE("thinking " << thinking << ": verbatim turns " << verbatim_msgs << ", scripted/edited " << scripted_msgs);
}

}  // namespace

TEST_CASE("deepseek_v41 agent loop: 20 turns, every prompt extends the previous prompt + output") {
  auto s = V41Server::Make();
  if (!s) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  AgentLoop(s.get(), false, 20);
  AgentLoop(s.get(), true, 6);  // reasoning sent back as reasoning_content is replayed too
}

TEST_CASE("deepseek_v41 replay memory persists in a 0600 file and survives a restart") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(CEDAR_BINARY_DIR) / "server_dsml_test" / "persist";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "replay_memory.jsonl").string();
  server::DsmlMemory::Entry e;
  e.prompt_hash = 0xfedcba9876543210ull;
  e.prompt_bytes = 1234;
  e.shown.role = bridge::Role::kAssistant;
  e.shown.content = "héllo \"quoted\"\n";
  e.shown.reasoning = "think";
  e.shown.tool_calls = {{"call_1", "run", R"({"cmd": "ls"})"}};
  e.raw = "raw text <｜DSML｜ calls>";
  e.ids = {5, 129279, 0, 77};
  {
    server::DsmlMemory m(4);
    m.Persist(path);
    for (int i = 0; i < 6; ++i) {
      e.ids[0] = i;
      m.Remember("s1", e);
    }
    m.Remember("s2", e);
  }
  CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  std::ofstream(path, std::ios::app) << "{\"scope\": \"s1\", \"hash\": 1, \"by";  // a write cut by a crash
  {
    server::DsmlMemory m(4);
    m.Persist(path);
    const auto s1 = m.Entries("s1");
    REQUIRE(s1.size() == 4);  // the bound holds after reloading
    CHECK(s1.front()->ids == std::vector<int32_t>{5, 129279, 0, 77});
    CHECK(s1.back()->ids[0] == 2);
    CHECK(s1.front()->prompt_hash == e.prompt_hash);
    CHECK(s1.front()->prompt_bytes == e.prompt_bytes);
    CHECK(s1.front()->shown == e.shown);
    CHECK(s1.front()->raw == e.raw);
    CHECK(m.Entries("s2").size() == 1);
    m.Forget("s2");  // a deleted session leaves the file
  }
  server::DsmlMemory m(4);
  m.Persist(path);
  CHECK(m.Entries("s1").size() == 4);
  CHECK(m.Entries("s2").empty());
}

TEST_CASE("deepseek_v41: after a restart the server still replays a turn it generated before") {
  namespace fs = std::filesystem;
  if (testing::DeepSeekV3TokenizerDir().empty()) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  const fs::path dir = fs::path(CEDAR_BINARY_DIR) / "server_dsml_test" / "restart";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string memory_path = (dir / "replay_memory.jsonl").string();
  ojson messages = ojson::array({{{"role", "user"}, {"content", "Say something."}}});
  json reply;
  {
    auto s = V41Server::Make();
    server::ApiOptions ao;
    ao.tokenizer = s->tok;
    ao.replay_memory_path = memory_path;
    s->api = std::make_unique<server::Api>(*s->manager, ao);
    reply = s->Post("/v1/chat/completions", ojson{{"messages", messages}, {"max_tokens", 8}, {"seed", 3}}.dump());
  }
  messages.push_back(ojson::parse(reply["choices"][0]["message"].dump()));
  messages.push_back({{"role", "user"}, {"content", "Again."}});
  auto s = V41Server::Make();  // a new server process, as far as the Api can tell
  const std::string body = ojson{{"messages", messages}, {"max_tokens", 4}}.dump();
  CHECK(s->api->ChatPromptIds(body).size() > 0);
  s->Post("/v1/chat/completions", body);
  CHECK(s->api->metrics().totals().replay_exact == 0);  // no memory file: canonical
  server::ApiOptions ao;
  ao.tokenizer = s->tok;
  ao.replay_memory_path = memory_path;
  s->api = std::make_unique<server::Api>(*s->manager, ao);
  s->Post("/v1/chat/completions", body);
  CHECK(s->api->metrics().totals().replay_exact == 1);
  CHECK(s->api->metrics().totals().replay_canonical == 0);
}
