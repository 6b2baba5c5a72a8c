// Issue 19's sampling fields on /v1/chat/completions and /v1/completions, checked against the
// engine directly: logprobs equal log_softmax of the model's logits (temperature 1) computed here
// by a full prefill of prompt + output[:k]; logit_bias and the penalties move greedy decoding to
// the argmax of the adjusted logits, adjusted here by OpenAI's formula; return_token_ids; the
// fields refused with 400 and the no-op ones accepted.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "engine/engine.h"
#include "server/logprobs_json.h"
#include "tests/server_fixture.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::ApiFixture;
using nlohmann::json;

namespace {

// The model's logits [V] after `ids`, by one full prefill (no cache, no decode steps).
std::vector<float> EngineLogits(const Model& m, const std::vector<int32_t>& ids) {
  SequenceState st(m.config());
  PrefillOptions o;
  o.mode = PrefillMode::kFull;
  return Prefill(m, st, ids, o).logits;
}

// log_softmax in double, written here (not engine/logprobs.h) so the test judges the server.
std::vector<double> LogSoftmax(const std::vector<float>& x) {
  double mx = -INFINITY, sum = 0;
  for (float v : x) mx = std::max(mx, double(v));
  for (float v : x) sum += std::exp(double(v) - mx);
  std::vector<double> out;
  for (float v : x) out.push_back(double(v) - mx - std::log(sum));
  return out;
}

// The server decodes step by step from a cached/prefilled state while EngineLogits prefills the
// whole sequence: the same math in another summation order, so float32 rounding differs. The
// tiny model's logits are O(1); 2e-3 in log-probability is far below any real disagreement
// (a wrong row or a temperature other than 1 moves them by >0.1).
constexpr double kTol = 2e-3;

// The decoder policy `exact`: the tiny model's window is 8, so the default (auto) runs a bounded
// replay for these 24-token prompts, an approximation a full prefill does not reproduce.
server::ApiOptions Exact() {
  server::ApiOptions o;
  o.decoder_policy = session::DecoderPolicy::kExact;
  return o;
}

std::vector<int32_t> Prompt() { return cedar::test::RandomTokens(24, 256, 7); }

json Completion(json extra) {
  json b = {{"prompt", Prompt()}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

json Chat(json extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", "hello there"}}}}, {"max_tokens", 6}, {"temperature", 0},
            {"ignore_eos", true}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

// The top-k ids of the engine's distribution (ties: lower id first, as the server).
std::vector<int32_t> TopIds(const std::vector<float>& logits, size_t k) {
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  ids.resize(k);
  return ids;
}

}  // namespace

TEST_CASE("completions: logprobs and return_token_ids equal the engine's log_softmax and ids") {
  ApiFixture f({}, Exact());
  const json j = f.Ok("/v1/completions", Completion({{"logprobs", 3}, {"return_token_ids", true}}));
  const json& c = j["choices"][0];
  REQUIRE(c["prompt_token_ids"] == json(Prompt()));
  const std::vector<int32_t> out = c["token_ids"].get<std::vector<int32_t>>();
  REQUIRE(out.size() == 6);
  const json& lp = c["logprobs"];
  REQUIRE(lp["token_logprobs"].size() == out.size());
  REQUIRE(lp["top_logprobs"].size() == out.size());
  REQUIRE(lp["text_offset"].size() == out.size());
  std::vector<int32_t> ctx = Prompt();
  for (size_t k = 0; k < out.size(); ++k) {
    INFO("token " << k);
    const std::vector<float> logits = EngineLogits(*f.model, ctx);
    const std::vector<double> ls = LogSoftmax(logits);
    CHECK(out[k] == TopIds(logits, 1)[0]);  // greedy
    CHECK(std::abs(lp["token_logprobs"][k].get<double>() - ls[size_t(out[k])]) < kTol);
    const json& alts = lp["top_logprobs"][k];
    CHECK(alts.size() <= 3);  // three ids; two may show as the same text (U+FFFD)
    for (auto it = alts.begin(); it != alts.end(); ++it) {
      // Each shown alternative is one of the three most likely; its value is that id's.
      bool found = false;
      for (int32_t id : TopIds(logits, 3))
        if (cedar::server::LogprobTokenText(f.api->tokenizer(), id) == it.key() &&
            std::abs(it.value().get<double>() - ls[size_t(id)]) < kTol)
          found = true;
      CHECK_MESSAGE(found, it.key() << " " << it.value());
    }
    ctx.push_back(out[k]);
  }
  // Without the flags the response carries neither.
  const json plain = f.Ok("/v1/completions", Completion({}));
  CHECK(plain["choices"][0]["logprobs"].is_null());
  CHECK(!plain["choices"][0].contains("token_ids"));
  CHECK(plain["choices"][0]["text"] == c["text"]);
}

TEST_CASE("completions streamed: token_ids and logprobs over the chunks equal the whole response's") {
  ApiFixture f({}, Exact());
  const json whole = f.Ok("/v1/completions", Completion({{"logprobs", 2}, {"return_token_ids", true}}));
  // A cache partition of its own: computed from scratch as the first was (a restore from the
  // cache reorders float sums, which moves logprobs in the 7th digit).
  auto r = f.Post("/v1/completions",
                  Completion({{"logprobs", 2}, {"return_token_ids", true}, {"stream", true}, {"cache_salt", "stream"}}));
  REQUIRE(r.status == 200);
  std::vector<int32_t> ids;
  std::vector<double> lps;
  int prompt_ids_seen = 0;
  for (const json& e : cedar::test::SseEvents(r.body)) {
    const json& c = e["choices"][0];
    if (c.contains("prompt_token_ids")) {
      prompt_ids_seen++;
      CHECK(c["prompt_token_ids"] == json(Prompt()));
    }
    for (int32_t id : c.value("token_ids", std::vector<int32_t>{})) ids.push_back(id);
    if (c["logprobs"].is_object())
      for (const json& x : c["logprobs"]["token_logprobs"]) lps.push_back(x.get<double>());
  }
  CHECK(prompt_ids_seen == 1);
  CHECK(json(ids) == whole["choices"][0]["token_ids"]);
  CHECK(json(lps) == whole["choices"][0]["logprobs"]["token_logprobs"]);
}

TEST_CASE("chat: logprobs and top_logprobs, streamed and whole, equal the engine's log_softmax") {
  ApiFixture f({}, Exact());
  const json body = Chat({{"logprobs", true}, {"top_logprobs", 2}});
  const json whole = f.Ok("/v1/chat/completions", body);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 6);
  const std::vector<int32_t> prompt = f.api->ChatPromptIds(body.dump());
  const std::vector<double> ls = LogSoftmax(EngineLogits(*f.model, prompt));
  const std::vector<int32_t> top = TopIds(EngineLogits(*f.model, prompt), 2);
  CHECK(std::abs(content[0]["logprob"].get<double>() - ls[size_t(top[0])]) < kTol);  // greedy: the top token
  REQUIRE(content[0]["top_logprobs"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    const json& t = content[0]["top_logprobs"][i];
    CHECK(std::abs(t["logprob"].get<double>() - ls[size_t(top[size_t(i)])]) < kTol);
    CHECK(t["bytes"].is_array());
  }
  for (const json& e : content) CHECK(e["logprob"].get<double>() <= 0);

  auto r = f.Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 2}, {"stream", true}}));
  REQUIRE(r.status == 200);
  json streamed = json::array();
  for (const json& e : cedar::test::SseEvents(r.body)) {
    const json& c = e["choices"][0];
    if (c["logprobs"].is_object())
      for (const json& x : c["logprobs"]["content"]) streamed.push_back(x);
  }
  CHECK(streamed == content);
  // logprobs false: null, as OpenAI.
  CHECK(f.Ok("/v1/chat/completions", Chat({}))["choices"][0]["logprobs"].is_null());
}

// Without `seed` a sampled turn draws a seed of its own (OpenAI's, vLLM's and llama.cpp's
// behaviour: a retry gets another sample) and names it in `cedar.seed`; sending that seed back
// repeats the turn token for token.
TEST_CASE("without seed each sampled turn draws a seed, named in cedar.seed, that repeats it") {
  ApiFixture f;
  const json body = Completion({{"temperature", 1.0}, {"max_tokens", 24}, {"return_token_ids", true}});
  auto run = [&](const json& b) {
    const json j = f.Ok("/v1/completions", b);
    REQUIRE(j["cedar"]["seed"].is_number_unsigned());
    return std::make_pair(j["cedar"]["seed"].get<uint64_t>(), j["choices"][0]["token_ids"].get<std::vector<int32_t>>());
  };
  const auto [seed_a, ids_a] = run(body);
  const auto [seed_b, ids_b] = run(body);
  CHECK(seed_a != seed_b);
  CHECK(seed_a < (uint64_t(1) << 53));  // exact in a JavaScript number
  // 24 tokens sampled at temperature 1 over the tiny model's near-uniform logits: two draws
  // agree with probability far below 1e-9.
  CHECK(ids_a != ids_b);
  json again = body;
  again["seed"] = seed_a;
  const auto [seed_c, ids_c] = run(again);
  CHECK(seed_c == seed_a);
  CHECK(ids_c == ids_a);
}

// seed -1 draws one (llama.cpp's server's default); other negatives and non-integers are refused
// by name; a seed above 2^63 is taken and reported as sent.
TEST_CASE("seed -1 draws a seed; negative or fractional seeds are refused; 64-bit seeds are kept") {
  ApiFixture f;
  const json body = Completion({{"temperature", 1.0}, {"max_tokens", 8}});
  json minus_one = body;
  minus_one["seed"] = -1;
  const json a = f.Ok("/v1/completions", minus_one), b = f.Ok("/v1/completions", minus_one);
  REQUIRE(a["cedar"]["seed"].is_number_unsigned());
  CHECK(a["cedar"]["seed"].get<uint64_t>() < (uint64_t(1) << 53));
  CHECK(a["cedar"]["seed"] != b["cedar"]["seed"]);
  for (const json& bad : {json(-2), json(std::numeric_limits<int64_t>::min()), json(1.5), json("7")}) {
    json r = body;
    r["seed"] = bad;
    const auto res = f.Post("/v1/completions", r);
    INFO("seed " << bad.dump() << " -> " << res.body);
    CHECK(res.status == 400);
    CHECK(res.body.find("seed: expected an integer in [0, 2^64), or -1 to draw one") != std::string::npos);
  }
  json big = body;
  big["seed"] = uint64_t(18000000000000000000ull);
  const json j = f.Ok("/v1/completions", big);
  CHECK(j["cedar"]["seed"].get<uint64_t>() == 18000000000000000000ull);
}

// `cedar serve --seed S` (ApiOptions::seed): two servers started with the same S draw the same
// seeds for the same requests in the same order; another S draws others.
TEST_CASE("ApiOptions::seed makes the drawn seeds reproducible from server to server") {
  auto drawn = [](uint64_t server_seed) {
    server::ApiOptions o;
    o.seed = server_seed;
    ApiFixture f({}, o);
    std::vector<uint64_t> seeds;
    for (int i = 0; i < 3; ++i)
      seeds.push_back(f.Ok("/v1/completions", Completion({{"temperature", 1.0}}))["cedar"]["seed"].get<uint64_t>());
    return seeds;
  };
  const std::vector<uint64_t> a = drawn(5);
  CHECK(a == drawn(5));
  CHECK(a != drawn(6));
  CHECK(a[0] != a[1]);
}

TEST_CASE("logit_bias moves greedy decoding; -100 bans a token") {
  ApiFixture f({}, Exact());
  const std::vector<int32_t> plain =
      f.Ok("/v1/completions", Completion({{"return_token_ids", true}}))["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  const int32_t first = plain[0];
  const int32_t other = first == 65 ? 66 : 65;
  json bias = {{std::to_string(other), 100}};
  auto forced =
      f.Ok("/v1/completions", Completion({{"return_token_ids", true}, {"logit_bias", bias}}))["choices"][0]["token_ids"];
  for (const json& id : forced) CHECK(id == other);
  json ban = {{std::to_string(first), -100}};
  auto banned =
      f.Ok("/v1/completions", Completion({{"return_token_ids", true}, {"logit_bias", ban}}))["choices"][0]["token_ids"];
  for (const json& id : banned) CHECK(id != first);
  // Chat takes it too (the same sampling site).
  const json chat = f.Ok("/v1/chat/completions", Chat({{"logit_bias", bias}, {"max_tokens", 3}}));
  CHECK(chat["choices"][0]["message"]["content"] == std::string(3, char(other)));
}

TEST_CASE("presence and frequency penalties follow OpenAI's formula over the generated tokens") {
  ApiFixture f({}, Exact());
  // Negative values (allowed, [-2, 2]) reward repeats: on the random tiny model greedy decoding
  // rarely repeats a token within 12 steps, so positive penalties may never change a choice.
  const double presence = -0.5, frequency = -1.5;
  const json j = f.Ok("/v1/completions", Completion({{"return_token_ids", true},
                                                     {"max_tokens", 12},
                                                     {"presence_penalty", presence},
                                                     {"frequency_penalty", frequency}}));
  const std::vector<int32_t> out = j["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  REQUIRE(out.size() == 12);
  std::vector<int32_t> ctx = Prompt();
  std::map<int32_t, int> counts;
  bool mattered = false;  // some step's choice differs from the unpenalised argmax
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<float> logits = EngineLogits(*f.model, ctx);
    const int32_t raw = TopIds(logits, 1)[0];
    for (auto [id, n] : counts) logits[size_t(id)] -= float(n * frequency + presence);
    const std::vector<int32_t> top = TopIds(logits, 2);
    // Skip a near-tie, where rounding (see kTol) may pick either.
    if (logits[size_t(top[0])] - logits[size_t(top[1])] > 1e-3) CHECK_MESSAGE(out[k] == top[0], "step " << k);
    mattered |= top[0] != raw;
    counts[out[k]]++;
    ctx.push_back(out[k]);
  }
  CHECK_MESSAGE(mattered, "the penalties never changed a choice: the test would pass without them");
}

TEST_CASE("unsupported fields are refused naming the field; no-op fields are accepted") {
  ApiFixture f({}, Exact());
  auto refused = [&](const std::string& target, const json& body, const std::string& field) {
    auto r = f.Post(target, body);
    INFO(target << " " << body.dump() << " -> " << r.body);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == field);
  };
  refused("/v1/completions", Completion({{"echo", true}}), "echo");
  refused("/v1/completions", Completion({{"suffix", "x"}}), "suffix");
  refused("/v1/completions", Completion({{"best_of", 2}}), "best_of");
  refused("/v1/completions", Completion({{"n", 2}}), "n");
  refused("/v1/completions", Completion({{"logprobs", 21}}), "logprobs");
  refused("/v1/completions", Completion({{"logprobs", true}}), "logprobs");
  refused("/v1/completions", Completion({{"logit_bias", {{"abc", 1}}}}), "logit_bias");
  refused("/v1/completions", Completion({{"logit_bias", {{"5", 101}}}}), "logit_bias");
  refused("/v1/completions", Completion({{"logit_bias", {{"99999999", 1}}}}), "logit_bias");
  refused("/v1/completions", Completion({{"presence_penalty", 3}}), "presence_penalty");
  refused("/v1/completions", Completion({{"frequency_penalty", "high"}}), "frequency_penalty");
  refused("/v1/chat/completions", Chat({{"top_logprobs", 2}}), "top_logprobs");
  refused("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  refused("/v1/chat/completions", Chat({{"audio", {{"voice", "alloy"}}}}), "audio");
  refused("/v1/chat/completions", Chat({{"functions", json::array()}}), "functions");
  refused("/v1/chat/completions", Chat({{"modalities", {"text", "audio"}}}), "modalities");
  refused("/v1/chat/completions", Chat({{"n", 3}}), "n");
  refused("/v1/chat/completions", Chat({{"return_token_ids", true}}), "return_token_ids");
  // Defaults of the refused fields and the documented no-op fields pass.
  f.Ok("/v1/completions", Completion({{"echo", false}, {"suffix", ""}, {"best_of", 1}, {"n", 1}, {"user", "u1"}}));
  f.Ok("/v1/chat/completions", Chat({{"user", "u1"},
                                     {"metadata", {{"k", "v"}}},
                                     {"store", false},
                                     {"service_tier", "auto"},
                                     {"modalities", {"text"}},
                                     {"max_tokens", 1}}));
}
