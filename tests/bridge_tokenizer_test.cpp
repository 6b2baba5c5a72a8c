// ByteTokenizer ids and errors, and UTF-8-safe incremental decoding.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "tools_bridge/lib/tokenizer.h"
#include "tools_bridge/lib/utf8.h"

namespace cedar::bridge {
namespace {

const std::string kFffd(kReplacementChar);

// Strict UTF-8 check written independently of utf8.cpp (decode, then reject overlongs,
// surrogates and code points above U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST_CASE("ByteTokenizer: bytes are ids 0..255 and specials start at 256 in a fixed order") {
  ByteTokenizer tok(512);
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.Encode("A\xFF") == TokenIds{65, 255});
  CHECK(tok.Encode("").empty());
  const std::pair<std::string_view, TokenId> expected[] = {
      {"<|bos|>", 256},       {"<|eos|>", 257},  {"<|system|>", 258},    {"<|user|>", 259},
      {"<|assistant|>", 260}, {"<|tool|>", 261}, {"<|tool_call|>", 262}, {"<|/tool_call|>", 263},
      {"<|end|>", 264},       {"<|tools|>", 265}};
  for (auto [name, id] : expected) {
    CHECK(tok.SpecialId(name) == id);
    CHECK(tok.SpecialName(id) == name);
    CHECK(tok.IsSpecial(id));
    CHECK(tok.TokenBytes(id).empty());
  }
  CHECK_FALSE(tok.IsSpecial(255));
  CHECK_FALSE(tok.IsSpecial(266));  // unused
  CHECK_FALSE(tok.IsSpecial(-1));
  CHECK_FALSE(tok.IsSpecial(512));
  CHECK(tok.TokenBytes(300).empty());
  CHECK_FALSE(tok.FindSpecial("<|nope|>").has_value());
  CHECK_THROWS_WITH_AS(tok.SpecialId("<|nope|>"), doctest::Contains("<|nope|>"),
                       std::invalid_argument);
}

TEST_CASE("ByteTokenizer: text that spells a special token encodes as plain bytes") {
  ByteTokenizer tok;
  for (std::string_view name : kChatSpecialTokens) {
    const TokenIds ids = tok.Encode(name);
    REQUIRE(ids.size() == name.size());
    for (TokenId id : ids) CHECK(id < 256);
    CHECK(tok.Decode(ids) == name);
  }
}

TEST_CASE("ByteTokenizer: extra specials follow the chat specials; vocab size is checked") {
  ByteTokenizer tok(268, {"<|think|>", "<|/think|>"});
  CHECK(tok.SpecialId("<|think|>") == 266);
  CHECK(tok.SpecialId("<|/think|>") == 267);
  CHECK_NOTHROW(ByteTokenizer(266));
  CHECK_THROWS_WITH_AS(ByteTokenizer(265), doctest::Contains("needs >= 266"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ByteTokenizer(267, {"<|a|>", "<|b|>"}), doctest::Contains("needs >= 268"),
                       std::invalid_argument);
  CHECK_THROWS_AS(ByteTokenizer(512, {"<|user|>"}), std::invalid_argument);
  CHECK_THROWS_AS(ByteTokenizer(512, {""}), std::invalid_argument);
}

TEST_CASE("Decode: specials by name or skipped; out-of-vocab ids throw") {
  ByteTokenizer tok;
  const TokenIds ids = {256, 'h', 'i', 264, 300};
  CHECK(tok.Decode(ids) == "<|bos|>hi<|end|>");
  CHECK(tok.Decode(ids, SpecialText::kSkip) == "hi");
  const TokenIds bad = {'a', 512};
  CHECK_THROWS_AS(tok.Decode(bad), std::out_of_range);
  // A special interrupts an unfinished character.
  const TokenIds cut = {0xC3, 264, 0xA9};
  CHECK(tok.Decode(cut) == kFffd + "<|end|>" + kFffd);
}

TEST_CASE("UTF-8: ill-formed input becomes one U+FFFD per maximal subpart") {
  const std::string a = "A";  // kept apart so "\xC3" "A" is not read as one hex escape
  const std::pair<std::string, std::string> cases[] = {
      {"a\xC3", "a" + kFffd},                  // truncated at the end
      {"\xC3" + a, kFffd + a},                 // lead then ASCII
      {"\xE2\x82" + a, kFffd + a},             // 2-byte subpart: one U+FFFD
      {"\x80", kFffd},                         // lone continuation
      {"\xC0\xAF", Repeat(kFffd, 2)},          // overlong lead
      {"\xE0\x80\x80", Repeat(kFffd, 3)},      // overlong 3-byte
      {"\xED\xA0\x80", Repeat(kFffd, 3)},      // surrogate
      {"\xF0\x80", Repeat(kFffd, 2)},          // overlong 4-byte
      {"\xF4\x90\x80\x80", Repeat(kFffd, 4)},  // above U+10FFFF
      {"\xF0\x9F\x99", kFffd},                 // truncated emoji
      {"\xFF\xFE", Repeat(kFffd, 2)},          // never valid
      {"\xF0\x9F\x99\x82\xF0\x9F\x99", "\xF0\x9F\x99\x82" + kFffd},
  };
  for (const auto& c : cases) {
    const std::string& in = c.first;
    CAPTURE(in);
    CHECK(RepairUtf8(in) == c.second);
  }
}

TEST_CASE("UTF-8: the assembler's output does not depend on how the input is split") {
  std::mt19937 rng(7);
  const std::string samples[] = {
      "héllo wörld",  "日本語テキスト",       "🙂👍🏽 mixed ascii",
      "\xC3\xA9\xC3", "\xE2\x82\xAC\xE2\x82", "\xED\xA0\x80x\xF4\x8F\xBF\xBF"};
  std::vector<std::string> inputs(std::begin(samples), std::end(samples));
  for (int i = 0; i < 200; ++i) {  // random bytes, biased to high bytes
    std::string s;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      s.push_back(static_cast<char>(rng() % 3 == 0 ? rng() % 128 : 0x80 + rng() % 128));
    }
    inputs.push_back(s);
  }
  for (const std::string& in : inputs) {
    CAPTURE(in);
    const std::string whole = RepairUtf8(in);
    REQUIRE(IsValidUtf8(whole));
    if (IsValidUtf8(in)) CHECK(whole == in);
    for (size_t a = 0; a <= in.size(); ++a) {
      for (size_t b = a; b <= in.size(); ++b) {
        Utf8Assembler u;
        std::string out, piece;
        for (auto [lo, hi] : {std::pair{size_t{0}, a}, {a, b}, {b, in.size()}}) {
          piece.clear();
          u.Push(std::string_view(in).substr(lo, hi - lo), piece);
          CHECK(IsValidUtf8(piece));  // never ends inside a character
          out += piece;
        }
        u.Finish(out);
        CHECK(out == whole);
      }
    }
  }
}

TEST_CASE("StreamDecoder: id-at-a-time chunks are whole characters and join to Decode") {
  ByteTokenizer tok;
  const std::string text = "aé€🙂\xF0\x9F";
  TokenIds ids = tok.Encode(text);
  ids.insert(ids.begin() + 4, 264);  // <|end|> right after the first byte of "€"
  StreamDecoder dec(tok);
  std::string joined;
  std::vector<std::string> chunks;
  for (TokenId id : ids) {
    chunks.push_back(dec.Push(id));
    CHECK(IsValidUtf8(chunks.back()));
    joined += chunks.back();
  }
  joined += dec.Finish();
  CHECK(joined == tok.Decode(ids));
  CHECK(joined == "aé" + kFffd + "<|end|>" + Repeat(kFffd, 2) + "🙂" + kFffd);
  // The 4 bytes of 🙂 come out together on the last one.
  const size_t smile = ids.size() - 6;
  CHECK(chunks[smile] == "");
  CHECK(chunks[smile + 3] == "🙂");
}

}  // namespace
}  // namespace cedar::bridge
