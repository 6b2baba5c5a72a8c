// A model directory that carries the released tokenizer (model.safetensors + config.json with
// "tokenizer": "bpe" + tokenizer.json, vocab 129,280) loads and is served: the API encodes
// prompts with the BPE tokenizer and decodes the model's ids with it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/init.h"
#include "engine/model.h"
#include "server/api.h"
#include "tools_bridge/lib/chat_template.h"
#include "session/session_manager.h"
#include "tests/tokenizer_fixtures.h"
#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/model_tokenizer.h"

using namespace cedar;
using json = nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("A tiny model with the released DeepSeek tokenizer.json is loaded and served") {
  const std::string v3 = testing::DeepSeekV3TokenizerDir();
  if (v3.empty()) {
    MESSAGE(testing::MissingTokenizerMessage());
    return;
  }
  const fs::path dir = fs::path(CEDAR_BINARY_DIR) / "server_bpe_test" / "tiny-deepseek";
  fs::remove_all(dir);
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));
  c.vocab_size = 129280;
  WriteRandomModel(c, 3, dir.string());
  fs::copy_file(fs::path(v3) / "tokenizer.json", dir / "tokenizer.json");
  fs::copy_file(fs::path(v3) / "tokenizer_config.json", dir / "tokenizer_config.json");
  json cj = json::parse(std::ifstream(dir / "config.json"));
  cj["tokenizer"] = "bpe";
  std::ofstream(dir / "config.json") << cj.dump();

  std::shared_ptr<const Model> model = Model::Load(dir.string());
  std::shared_ptr<const bridge::Tokenizer> tok = bridge::LoadModelTokenizer(dir.string(), model->config().vocab_size);
  REQUIRE(dynamic_cast<const bridge::BpeTokenizer*>(tok.get()) != nullptr);
  auto manager = session::SessionManager::Start(model, {});
  server::ApiOptions ao;
  ao.tokenizer = tok;
  auto api = std::make_unique<server::Api>(*manager, ao);
  auto post = [&](const std::string& target, const json& body) {
    server::HttpRequest r;
    r.method = "POST";
    r.target = target;
    r.body = body.dump();
    server::HttpResponse res = api->Handle(r);
    INFO(res.body);
    REQUIRE(res.status == 200);
    return json::parse(res.body);
  };

  // Completions: the prompt's tokens are the BPE's (9 ids, where bytes would be 27).
  const std::string text = "Hello! 毕老师！1 + 1 = 2";
  const json done = post("/v1/completions", {{"prompt", text}, {"max_tokens", 4}});
  CHECK(done["usage"]["prompt_tokens"] == tok->Encode(text).size());
  CHECK(tok->Encode(text).size() < text.size() / 2);
  CHECK(done["choices"][0]["text"].get<std::string>() == bridge::RepairUtf8(done["choices"][0]["text"].get<std::string>()));

  // Chat: Cedar's template with its specials in the tokenizer's unused ids.
  std::vector<bridge::Message> msgs(1);
  msgs[0].content = "把这段代码改成 Rust 🦀";
  const bridge::ChatTemplate tpl(*tok);
  const json chat = post("/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", msgs[0].content}}}}, {"max_tokens", 4}});
  CHECK(chat["usage"]["prompt_tokens"] == tpl.RenderGenerationPrompt(msgs).size());
  CHECK(chat["usage"]["completion_tokens"].get<int>() >= 1);

  api.reset();
  manager->Shutdown(true);
}
