#include "tools_bridge/lib/tokenizer.h"

#include <stdexcept>

namespace cedar::bridge {
namespace {

std::string OutOfVocab(TokenId id, int32_t vocab_size) {
  return "token id " + std::to_string(id) + " is outside the vocab [0, " +
         std::to_string(vocab_size) + ")";
}

// Appends what one id contributes to a decode: bytes go through the UTF-8 assembler; a special
// first finishes any unfinished character (it cannot complete one) and then shows its name.
void DecodeOne(const Tokenizer& tok, TokenId id, SpecialText specials, Utf8Assembler& utf8,
               std::string& out) {
  if (!tok.InVocab(id)) throw std::out_of_range(OutOfVocab(id, tok.vocab_size()));
  if (auto name = tok.SpecialName(id)) {
    utf8.Finish(out);
    if (specials == SpecialText::kName) out.append(*name);
    return;
  }
  utf8.Push(tok.TokenBytes(id), out);
}

}  // namespace

TokenId Tokenizer::SpecialId(std::string_view name) const {
  if (auto id = FindSpecial(name)) return *id;
  throw std::invalid_argument("tokenizer has no special token " + std::string(name));
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, SpecialText specials) const {
  std::string out;
  Utf8Assembler utf8;
  for (TokenId id : ids) DecodeOne(*this, id, specials, utf8, out);
  utf8.Finish(out);
  return out;
}

std::string StreamDecoder::Push(TokenId id) {
  std::string out;
  DecodeOne(tokenizer_, id, specials_, utf8_, out);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out;
  utf8_.Finish(out);
  return out;
}

ByteTokenizer::ByteTokenizer(int32_t vocab_size, std::vector<std::string> extra_specials)
    : vocab_size_(vocab_size) {
  for (int b = 0; b < 256; ++b) bytes_[b] = static_cast<char>(b);
  specials_.assign(kChatSpecialTokens.begin(), kChatSpecialTokens.end());
  for (auto& name : extra_specials) {
    if (name.empty()) throw std::invalid_argument("ByteTokenizer: empty special token name");
    if (FindSpecial(name)) {
      throw std::invalid_argument("ByteTokenizer: special token " + name + " given twice");
    }
    specials_.push_back(std::move(name));
  }
  const int64_t needed = kFirstSpecialId + static_cast<int64_t>(specials_.size());
  if (vocab_size < needed) {
    throw std::invalid_argument("ByteTokenizer: vocab_size " + std::to_string(vocab_size) +
                                " is too small for 256 byte tokens + " +
                                std::to_string(specials_.size()) +
                                " special tokens (needs >= " + std::to_string(needed) + ")");
  }
  std::vector<AddedToken> names;
  for (size_t i = 0; i < specials_.size(); ++i) {
    names.push_back({.content = specials_[i], .id = kFirstSpecialId + TokenId(i), .special = true});
  }
  matcher_ = AddedTokenMatcher(names);
}

TokenIds ByteTokenizer::EncodeWithSpecials(std::string_view text) const {
  TokenIds ids;
  ids.reserve(text.size());
  std::vector<AddedTokenMatcher::Part> parts;
  matcher_.Split(text, parts);
  for (const auto& p : parts) {
    if (p.id >= 0) {
      ids.push_back(p.id);
    } else {
      for (char c : p.text) ids.push_back(static_cast<uint8_t>(c));
    }
  }
  return ids;
}

TokenIds ByteTokenizer::Encode(std::string_view text) const {
  TokenIds ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string_view ByteTokenizer::TokenBytes(TokenId id) const {
  if (id >= 0 && id < kFirstSpecialId) return std::string_view(&bytes_[id], 1);
  return {};
}

std::optional<TokenId> ByteTokenizer::FindSpecial(std::string_view name) const {
  for (size_t i = 0; i < specials_.size(); ++i) {
    if (specials_[i] == name) return kFirstSpecialId + static_cast<TokenId>(i);
  }
  return std::nullopt;
}

std::optional<std::string_view> ByteTokenizer::SpecialName(TokenId id) const {
  const int64_t i = static_cast<int64_t>(id) - kFirstSpecialId;
  if (i < 0 || i >= static_cast<int64_t>(specials_.size())) return std::nullopt;
  return specials_[i];
}

}  // namespace cedar::bridge
