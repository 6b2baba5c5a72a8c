#include "tools_bridge/lib/model_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "tools_bridge/lib/bpe_tokenizer.h"

namespace cedar::bridge {

TokenizerKind ModelTokenizerKind(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + " is not valid JSON: " + e.what());
  }
  if (!j.contains("tokenizer")) {
    // A released DeepSeek-V4.1 config.json (nested text_config) names no tokenizer: the release
    // ships tokenizer.json beside it, so that is the tokenizer (byte only when it is absent).
    if (j.contains("text_config") && std::filesystem::exists(model_dir + "/tokenizer.json")) return TokenizerKind::kBpe;
    return TokenizerKind::kByte;
  }
  const nlohmann::json& t = j["tokenizer"];
  if (t == "byte") return TokenizerKind::kByte;
  if (t == "bpe") return TokenizerKind::kBpe;
  throw std::runtime_error(path + ": \"tokenizer\": expected \"byte\" or \"bpe\", found " + t.dump());
}

std::unique_ptr<Tokenizer> LoadModelTokenizer(const std::string& model_dir, int32_t vocab_size,
                                              ModelTokenizerOptions options) {
  if (ModelTokenizerKind(model_dir) == TokenizerKind::kByte) {
    // Exactly the model's vocab: every id the tokenizer accepts must be one the model scores.
    spdlog::debug("tokenizer: byte (vocab {})", vocab_size);
    try {
      return std::make_unique<ByteTokenizer>(vocab_size);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(model_dir + "/config.json: " + e.what());
    }
  }
  if (!std::filesystem::exists(model_dir + "/tokenizer.json")) {
    throw std::runtime_error(model_dir + "/config.json declares \"tokenizer\": \"bpe\" but " + model_dir +
                             "/tokenizer.json is missing");
  }
  BpeTokenizerOptions bo;
  bo.vocab_size = vocab_size;
  if (options.cedar_chat_specials) {
    bo.extra_specials.assign(kChatSpecialTokens.begin(), kChatSpecialTokens.end());
    bo.extra_specials_optional = true;
  }
  std::unique_ptr<BpeTokenizer> tok;
  try {
    tok = BpeTokenizer::FromDir(model_dir, bo);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  spdlog::debug("tokenizer: bpe from {}/tokenizer.json ({} ids, vocab {})", model_dir, tok->tokenizer_size(),
                vocab_size);
  return tok;
}

}  // namespace cedar::bridge
