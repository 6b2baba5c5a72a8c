// The API as a function from request to response (no sockets), on the tiny model.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "tests/server_fixture.h"
#include "server/api_error.h"
#include "server/live_turn.h"

namespace cedar::test {
namespace {

using nlohmann::json;

json UserChat(const std::string& text, json extra = json::object()) {
  json body = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
  body.update(extra);
  return body;
}

// The error object of a response that must carry `status`.
json ErrorOf(const server::HttpResponse& r, int status) {
  INFO(r.body);
  CHECK(r.status == status);
  const json j = json::parse(r.body);
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  return j["error"];
}

TEST_CASE("chat completion: OpenAI's shape, usage with cached_tokens, the cedar accounting") {
  ApiFixture f;
  const json j = f.Ok("/v1/chat/completions", UserChat("hello", {{"max_tokens", 8}}));
  CHECK(j["object"] == "chat.completion");
  CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(j["model"] == "tiny");
  const json& c = j["choices"][0];
  CHECK(c["message"]["role"] == "assistant");
  CHECK(c["message"]["content"].is_string());
  CHECK((c["finish_reason"] == "length" || c["finish_reason"] == "stop"));
  const json& u = j["usage"];
  CHECK(u["prompt_tokens"].get<int>() > 0);
  CHECK(u["completion_tokens"].get<int>() <= 8);
  CHECK(u["total_tokens"] == u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  CHECK(u["prompt_tokens_details"]["cached_tokens"] == 0);
  const json& k = j["cedar"];
  for (const char* key : {"tokens_encoded", "encoder_replay_rows", "decoder_rows", "layer_token_units", "prefill_units",
                          "ttft_ms", "total_ms", "cached_tokens_by_tier", "baselines"}) {
    CHECK_MESSAGE(k.contains(key), key);
  }
  CHECK(k["baselines"]["no_cache_units"].get<int64_t>() == u["prompt_tokens"].get<int64_t>() * 8);
}

TEST_CASE("streamed and whole responses carry the same text for a fixed seed") {
  ApiFixture f;
  for (double temperature : {0.0, 0.9}) {
    const json params = {{"max_tokens", 24}, {"temperature", temperature}, {"seed", 11}};
    const json whole = f.Ok("/v1/chat/completions", UserChat("tell me", params));
    json sp = params;
    sp["stream"] = true;
    sp["stream_options"] = {{"include_usage", true}};
    const server::HttpResponse r = f.Post("/v1/chat/completions", UserChat("tell me", sp));
    REQUIRE(r.status == 200);
    CHECK(r.content_type == "text/event-stream");
    const std::vector<json> events = SseEvents(r.body);
    REQUIRE(events.size() >= 3);
    CHECK(events.front()["choices"][0]["delta"]["role"] == "assistant");
    CHECK(StreamedText(events) == whole["choices"][0]["message"]["content"].get<std::string>());
    const json& finish = events[events.size() - 2];
    CHECK(finish["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]);
    CHECK(finish.contains("cedar"));
    const json& usage = events.back();
    CHECK(usage["choices"].empty());
    CHECK(usage["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]);
    CHECK(usage["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]);
    for (const json& e : events) CHECK(e["id"] == events.front()["id"]);
  }
}

TEST_CASE("stop strings end the turn and are left out, streamed or not") {
  ApiFixture f;
  const json params = {{"max_tokens", 40}, {"temperature", 0.0}, {"ignore_eos", true}};
  const json free_run = f.Ok("/v1/completions", {{"prompt", "The quick brown fox"}, {"max_tokens", 40},
                                                 {"temperature", 0.0}, {"ignore_eos", true}});
  const std::string text = free_run["choices"][0]["text"];
  // A stop string from the middle of the free run: two ASCII characters, first occurrence.
  // (Special ids show by name in the text but never match a stop string: look before them.)
  const size_t end = std::min(text.size(), text.find("<|"));
  size_t at = std::string::npos;
  for (size_t i = 4; i + 2 < end; ++i) {
    if (uint8_t(text[i]) < 0x80 && uint8_t(text[i + 1]) < 0x80 && text[i] != '\0' && text[i + 1] != '\0') {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) return;  // (no ASCII pair in this model's output)
  const std::string stop = text.substr(at, 2);
  const std::string expected = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    json body = {{"prompt", "The quick brown fox"}, {"stop", json::array({stop, "\x01\x02\x03"})}, {"stream", stream}};
    body.update(params);
    const server::HttpResponse r = f.Post("/v1/completions", body);
    REQUIRE(r.status == 200);
    if (stream) {
      const auto events = SseEvents(r.body);
      CHECK(StreamedText(events) == expected);
      CHECK(events.back()["choices"][0]["finish_reason"] == "stop");
    } else {
      const json j = json::parse(r.body);
      CHECK(j["choices"][0]["text"] == expected);
      CHECK(j["choices"][0]["finish_reason"] == "stop");
    }
  }
  // The same through chat: streamed == whole.
  json chat = UserChat("fox", params);
  chat["stop"] = stop;
  const json whole = f.Ok("/v1/chat/completions", chat);
  chat["stream"] = true;
  CHECK(StreamedText(SseEvents(f.Post("/v1/chat/completions", chat).body)) ==
        whole["choices"][0]["message"]["content"].get<std::string>());
}

TEST_CASE("errors: OpenAI's shape with the right status") {
  ApiFixture f;
  SUBCASE("malformed JSON") {
    const json e = ErrorOf(f.Call("POST", "/v1/chat/completions", "{\"messages\": ["), 400);
    CHECK(e["code"] == "invalid_json");
    ErrorOf(f.Call("POST", "/v1/chat/completions", "[1,2]"), 400);
  }
  SUBCASE("known fields with wrong types name the field") {
    const std::vector<std::pair<json, std::string>> cases = {
        {UserChat("x", {{"temperature", "hot"}}), "temperature"},
        {UserChat("x", {{"temperature", 3}}), "temperature"},
        {UserChat("x", {{"top_p", 0}}), "top_p"},
        {UserChat("x", {{"max_tokens", -1}}), "max_tokens"},
        {UserChat("x", {{"max_tokens", 1.5}}), "max_tokens"},
        {UserChat("x", {{"stream", "yes"}}), "stream"},
        {UserChat("x", {{"stop", 5}}), "stop"},
        {UserChat("x", {{"seed", "1"}}), "seed"},
        {UserChat("x", {{"tools", {{"type", "function"}}}}), "tools"},
        {UserChat("x", {{"tool_choice", "sometimes"}}), "tool_choice"},
        {UserChat("x", {{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}), "tool_choice"},
        {UserChat("x", {{"n", 2}}), "n"},
        {UserChat("x", {{"session_id", 7}}), "session_id"},
        {{{"messages", "hi"}}, "messages"},
        {{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages"},
        {{{"model", "tiny"}}, "messages"},
    };
    for (const auto& [body, param] : cases) {
      const json e = ErrorOf(f.Post("/v1/chat/completions", body), 400);
      CHECK_MESSAGE(e["param"] == param, body.dump());
    }
    ErrorOf(f.Post("/v1/completions", {{"prompt", json::array({1, "x"})}}), 400);
    ErrorOf(f.Post("/v1/completions", {{"prompt", json::array({1, 99999})}}), 400);
  }
  SUBCASE("a tool message that answers no tool call") {
    const json body = {{"messages", json::array({{{"role", "user"}, {"content", "x"}},
                                                 {{"role", "tool"}, {"tool_call_id", "call_9"}, {"content", "42"}}})}};
    const json e = ErrorOf(f.Post("/v1/chat/completions", body), 400);
    CHECK(e["message"].get<std::string>().find("call_9") != std::string::npos);
  }
  SUBCASE("a prompt longer than the model's limit") {
    const json e = ErrorOf(f.Post("/v1/chat/completions", UserChat(std::string(5000, 'a'))), 400);
    CHECK(e["code"] == "context_length_exceeded");
    CHECK(ErrorOf(f.Post("/v1/completions", {{"prompt", std::string(4096, 'b')}}), 400)["code"] ==
          "context_length_exceeded");
  }
  SUBCASE("unknown session, route, method") {
    CHECK(ErrorOf(f.Post("/v1/chat/completions", UserChat("x", {{"session_id", "nope"}})), 404)["code"] ==
          "session_not_found");
    ErrorOf(f.Post("/v1/chat/completions", UserChat("x"), {{"X-Session-Id", "nope"}}), 404);
    ErrorOf(f.Call("GET", "/v1/sessions/nope"), 404);
    ErrorOf(f.Call("DELETE", "/v1/sessions/nope"), 404);
    ErrorOf(f.Call("GET", "/v2/whatever"), 404);
    ErrorOf(f.Call("GET", "/v1/chat/completions"), 405);
    ErrorOf(f.Call("POST", "/health"), 405);
    ErrorOf(f.Post("/v1/chat/completions", UserChat("x", {{"session_id", "a"}}), {{"X-Session-Id", "b"}}), 400);
  }
  SUBCASE("draining: 503") {
    f.api->StartDraining();
    ErrorOf(f.Post("/v1/chat/completions", UserChat("x")), 503);
    CHECK(f.Call("GET", "/health").status == 503);
  }
}

TEST_CASE("two turns at once on one session: 409 at once, not a wait") {
  ApiFixture f;
  f.Ok("/v1/sessions", {{"session_id", "s1"}});
  server::HttpRequest first;
  first.method = "POST";
  first.target = "/v1/chat/completions";
  first.body = UserChat("long", {{"session_id", "s1"}, {"stream", true}, {"max_tokens", 4000}, {"ignore_eos", true}}).dump();
  server::HttpResponse running = f.api->Handle(first);
  REQUIRE(running.status == 200);
  std::thread waiter(running.complete);
  const auto t0 = std::chrono::steady_clock::now();
  const json e = ErrorOf(f.Post("/v1/chat/completions", UserChat("again", {{"session_id", "s1"}})), 409);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK(e["code"] == "session_busy");
  CHECK(e["message"].get<std::string>().find("s1") != std::string::npos);
  ErrorOf(f.Call("DELETE", "/v1/sessions/s1"), 409);
  // The client goes away: the turn ends at its next token.
  running.stream->Cancel();
  waiter.join();
  std::string rest;
  while (running.stream->Pull(&rest)) {
  }
  CHECK(f.manager->Metrics().turns_cancelled == 1);
  f.Ok("/v1/chat/completions", UserChat("now", {{"session_id", "s1"}, {"max_tokens", 2}}));
}

TEST_CASE("sessions: create (with a pinned prefix), get, list, delete") {
  ApiFixture f;
  const json system = {{"role", "system"}, {"content", "You are an agent. Use the tools."}};
  const json created = f.Ok("/v1/sessions", {{"session_id", "agent-1"}, {"messages", {system}}, {"pin_ttl_s", 60}});
  CHECK(created["id"] == "agent-1");
  CHECK(created["pinned_tokens"].get<int>() > 10);
  CHECK(f.Post("/v1/sessions", {{"session_id", "agent-1"}}).status == 409);
  const json anon = f.Ok("/v1/sessions", json::object());
  CHECK(!anon["id"].get<std::string>().empty());
  const json got = json::parse(f.Call("GET", "/v1/sessions/agent-1").body);
  CHECK(got["pinned_tokens"] == created["pinned_tokens"]);
  CHECK(got["turns"] == 0);
  CHECK(json::parse(f.Call("GET", "/v1/sessions").body)["data"].size() == 2);
  // Another session with the same system prompt hits the pinned prefix's pages.
  const json turn = f.Ok("/v1/chat/completions", {{"session_id", anon["id"]},
                                                  {"messages", {system, {{"role", "user"}, {"content", "go"}}}},
                                                  {"max_tokens", 2}});
  CHECK(turn["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
  CHECK(f.Call("DELETE", "/v1/sessions/agent-1").status == 200);
  CHECK(f.Call("GET", "/v1/sessions/agent-1").status == 404);
}

TEST_CASE("exact replay: an assistant message sent back unchanged extends the previous prompt + output") {
  ApiFixture f;
  f.Ok("/v1/sessions", {{"session_id", "r"}});
  json messages = {{{"role", "system"}, {"content", "sys"}}, {{"role", "user"}, {"content", "first question"}}};
  int64_t previous_context = 0;
  for (int turn = 0; turn < 4; ++turn) {
    const json j = f.Ok("/v1/chat/completions", {{"session_id", "r"}, {"messages", messages}, {"max_tokens", 12},
                                                 {"temperature", 1.0}, {"seed", turn}});
    const int64_t cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
    // The live state holds the previous prompt and all but the last generated token.
    CHECK(cached >= previous_context - 1);
    CHECK(j["cedar"]["cached_tokens_by_tier"]["live"].get<int64_t>() == (turn == 0 ? 0 : cached));
    previous_context = j["usage"]["prompt_tokens"].get<int64_t>() + j["usage"]["completion_tokens"].get<int64_t>();
    messages.push_back(j["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", "next " + std::to_string(turn)}});
  }
  CHECK(f.api->memory().entries() == 4);
  // A changed assistant message is rendered as sent: the cache then stops where it differs.
  json changed = messages;
  changed[2]["content"] = "something else entirely";
  const json j = f.Ok("/v1/chat/completions", {{"session_id", "r"}, {"messages", changed}, {"max_tokens", 1}});
  CHECK(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>() < previous_context - 20);
}

TEST_CASE("completions: prompt as text or ids; streamed equals whole") {
  ApiFixture f;
  const json a = f.Ok("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 6}, {"seed", 3}, {"temperature", 0.7}});
  const json b = f.Ok("/v1/completions", {{"prompt", {97, 98, 99}}, {"max_tokens", 6}, {"seed", 3}, {"temperature", 0.7}});
  CHECK(a["object"] == "text_completion");
  CHECK(a["choices"][0]["text"] == b["choices"][0]["text"]);
  CHECK(b["usage"]["prompt_tokens"] == 3);
  CHECK(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() >= 0);
  const auto events = SseEvents(
      f.Post("/v1/completions", {{"prompt", {{97, 98, 99}}}, {"max_tokens", 6}, {"seed", 3}, {"temperature", 0.7}, {"stream", true}})
          .body);
  CHECK(StreamedText(events) == a["choices"][0]["text"].get<std::string>());
}

TEST_CASE("models, health, metrics and cache state") {
  ApiFixture f;
  const json models = json::parse(f.Call("GET", "/v1/models").body);
  CHECK(models["data"][0]["id"] == "tiny");
  CHECK(models["data"][0]["max_model_len"] == 4096);
  CHECK(f.Call("GET", "/v1/models/tiny").status == 200);
  CHECK(json::parse(f.Call("GET", "/health").body)["status"] == "ok");
  int64_t prompt = 0, cached = 0, completion = 0;
  for (int i = 0; i < 3; ++i) {
    const json j = f.Ok("/v1/chat/completions", UserChat("same prompt for all", {{"max_tokens", 3}}));
    prompt += j["usage"]["prompt_tokens"].get<int64_t>();
    cached += j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    completion += j["usage"]["completion_tokens"].get<int64_t>();
  }
  const server::HttpResponse m = f.Call("GET", "/metrics");
  CHECK(m.content_type.rfind("text/plain", 0) == 0);
  auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(m.body.find("\n" + line + "\n") != std::string::npos);
  };
  has("cedar_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 3");
  has("cedar_prompt_tokens_total " + std::to_string(prompt));
  has("cedar_server_prompt_tokens_total " + std::to_string(prompt));
  has("cedar_server_cached_tokens_total " + std::to_string(cached));
  has("cedar_generated_tokens_total " + std::to_string(completion));
  has("cedar_turns_total 3");
  CHECK(m.body.find("cedar_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3") != std::string::npos);
  CHECK(m.body.find("cedar_cache_bytes{tier=\"ram\"}") != std::string::npos);
  const json cache = json::parse(f.Call("GET", "/v1/cache").body);
  CHECK(cache["ram"]["used_bytes"].get<uint64_t>() > 0);
  CHECK(cache["hit_tokens"]["ram"].get<int64_t>() == cached);
}

// The streamed format of tool calls, stop strings and late errors, fed by hand.
TEST_CASE("SSE framing: tool-call deltas, held-back stop strings, errors after the headers") {
  bridge::ByteTokenizer tok(512);
  bridge::ChatTemplate chat(tok);
  const bridge::ChatTokens& t = chat.tokens();
  server::TurnMeta meta;
  meta.id = "chatcmpl-test";
  meta.model = "tiny";
  meta.call_ids.prefix = "call_t_";
  meta.stop_ids = {t.end, t.eos};
  auto feed = [&](server::LiveTurn& turn, const std::string& text) {
    for (int32_t id : tok.Encode(text)) turn.Push(id);
  };
  SUBCASE("a tool call") {
    auto turn = server::LiveTurn::Manual(tok, {});
    auto stream = server::MakeTurnStream(turn, tok, meta, true, {});
    feed(*turn, "Let me look. ");
    turn->Push(t.tool_call);
    feed(*turn, R"({"name":"get_weather","arguments":{"city":"Oslo"}})");
    turn->Push(t.tool_call_end);
    turn->Push(t.end);
    session::TurnResult r;
    r.finish_reason = "stop";
    turn->Complete(r);
    turn->Wait();
    turn->Publish();
    std::string body;
    while (stream->Pull(&body)) {
    }
    const auto events = SseEvents(body);
    CHECK(StreamedText(events) == "Let me look. ");
    json start, args;
    for (const json& e : events) {
      const json& d = e["choices"].empty() ? json() : e["choices"][0]["delta"];
      if (!d.is_object() || !d.contains("tool_calls")) continue;
      if (d["tool_calls"][0].contains("id")) start = d["tool_calls"][0];
      else args = d["tool_calls"][0];
    }
    CHECK(start["index"] == 0);
    CHECK(start["id"] == "call_t_0");
    CHECK(start["type"] == "function");
    CHECK(start["function"]["name"] == "get_weather");
    CHECK(args["function"]["arguments"] == R"({"city":"Oslo"})");
    CHECK(events.back()["choices"][0]["finish_reason"] == "tool_calls");
  }
  SUBCASE("a stop string split across tokens is never shown") {
    auto turn = server::LiveTurn::Manual(tok, {"STOP"});
    auto stream = server::MakeTurnStream(turn, tok, meta, true, {"STOP"});
    std::string body;
    bool ended = false;
    for (int32_t id : tok.Encode("abc STxSTOPxyz")) {
      if (!turn->Push(id)) {
        ended = true;
        break;
      }
      stream->Pull(&body);
      CHECK(body.find("STOP") == std::string::npos);
    }
    CHECK(ended);
    session::TurnResult r;
    r.finish_reason = "cancelled";
    turn->Complete(r);
    turn->Wait();
    turn->Publish();
    while (stream->Pull(&body)) {
    }
    const auto events = SseEvents(body);
    CHECK(StreamedText(events) == "abc STx");
    CHECK(events.back()["choices"][0]["finish_reason"] == "stop");
  }
  SUBCASE("an error after the headers") {
    auto turn = server::LiveTurn::Manual(tok, {});
    auto stream = server::MakeTurnStream(turn, tok, meta, true, {});
    session::TurnResult r;
    r.finish_reason = "error";
    r.error_kind = session::ErrorKind::kSessionNotFound;
    r.error = "unknown session 'x'";
    turn->Complete(r);
    turn->Wait();
    turn->Publish();
    std::string body;
    while (stream->Pull(&body)) {
    }
    const auto events = SseEvents(body);
    CHECK(events.back()["error"]["code"] == "session_not_found");
  }
}

bridge::Message Msg(bridge::Role role, const std::string& content) {
  bridge::Message m;
  m.role = role;
  m.content = content;
  return m;
}

TEST_CASE("generation memory: reattaches only the same message in the same context") {
  bridge::ByteTokenizer tok(512);
  bridge::ChatTemplate chat(tok);
  server::GenerationMemory memory(4);
  std::vector<bridge::Message> conv = {Msg(bridge::Role::kUser, "hi")};
  const bridge::TokenIds gen_prompt = chat.RenderGenerationPrompt(conv);
  const bridge::Message shown = Msg(bridge::Role::kAssistant, "hello");
  const std::vector<int32_t> generated = {'h', 'e', 'l', 'l', 'o', ' ', chat.tokens().end};  // not canonical
  memory.Remember("s", gen_prompt, shown, generated);
  std::vector<bridge::Message> next = {conv[0], shown, Msg(bridge::Role::kUser, "more")};
  CHECK(memory.Reattach("s", chat, next, nullptr) == 1);
  CHECK(next[1].generated == generated);
  std::vector<bridge::Message> other_scope = {conv[0], shown};
  CHECK(memory.Reattach("t", chat, other_scope, nullptr) == 0);
  std::vector<bridge::Message> other_context = {Msg(bridge::Role::kUser, "HI"), shown};
  CHECK(memory.Reattach("s", chat, other_context, nullptr) == 0);
  std::vector<bridge::Message> changed = {conv[0], Msg(bridge::Role::kAssistant, "hello!")};
  CHECK(memory.Reattach("s", chat, changed, nullptr) == 0);
  memory.Forget("s");
  CHECK(memory.entries() == 0);
}

}  // namespace
}  // namespace cedar::test
