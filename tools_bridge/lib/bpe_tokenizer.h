// BpeTokenizer: a byte-level BPE tokenizer read from a Hugging Face tokenizer.json (+ its
// tokenizer_config.json), behind the same Tokenizer interface as ByteTokenizer. The pipeline is
// HF's: added tokens split out first (added_tokens.h) -> pre-tokenizer regex splits
// (pretokenizer.h, PCRE2) -> BPE merges by rank on each piece (bpe_model.h); decode maps ids
// back to bytes and repairs UTF-8 (tokenizer.h's Decode / StreamDecoder).
//
// How the Tokenizer contract maps onto HF's vocabulary:
//   - Every added token (special or not in HF's sense) is "special" here: it has a name and
//     Encode never yields it; EncodeWithSpecials matches them in text, as HF's encode does.
//   - Ordinary ids are the BPE vocabulary; TokenBytes gives their raw bytes.
//   - Ids from the tokenizer's size up to vocab_size are unused, except `extra_specials`
//     (Cedar's chat specials for a model that uses Cedar's own template), which take the first
//     ids after the tokenizer's own.
// Invalid UTF-8 input: HF only accepts strings, so text is first repaired (each ill-formed
// subpart becomes U+FFFD, RepairUtf8 in utf8.h, the WHATWG decoder's rule, which a JavaScript
// TextDecoder also follows) and then encoded; decode(encode(x)) == RepairUtf8(x).
// Supported tokenizer.json: normalizer null or an empty Sequence; pre_tokenizer as in
// pretokenizer.h; model BPE (no dropout, byte_fallback, continuing_subword_prefix or
// end_of_word_suffix; ignore_merges honoured); decoder ByteLevel or null. Anything else is
// refused at load with a message naming it.
//
// Thread contract: immutable after construction; const methods may run on any thread.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tools_bridge/lib/added_tokens.h"
#include "tools_bridge/lib/bpe_model.h"
#include "tools_bridge/lib/pretokenizer.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::bridge {

struct BpeTokenizerOptions {
  // Ids the model scores; 0 = the tokenizer's own size (+ extra_specials). Must be at least that.
  int32_t vocab_size = 0;
  // Names given the first ids after the tokenizer's own (e.g. kChatSpecialTokens); a name the
  // tokenizer already has keeps its id and is not added again.
  std::vector<std::string> extra_specials;
  // When the extras do not all fit under vocab_size: load without any of them instead of failing.
  bool extra_specials_optional = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // `tokenizer` is tokenizer.json's content; `config` tokenizer_config.json's or null (it
  // gives bos/eos names and added_tokens_decoder entries missing from tokenizer.json).
  // Throws std::invalid_argument naming what is unsupported or malformed.
  static std::unique_ptr<BpeTokenizer> FromJson(const nlohmann::json& tokenizer, const nlohmann::json& config,
                                                BpeTokenizerOptions options = {});
  // Reads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json. Throws
  // std::runtime_error naming the file that is missing or does not parse.
  static std::unique_ptr<BpeTokenizer> FromDir(const std::string& dir, BpeTokenizerOptions options = {});

  TokenIds Encode(std::string_view text) const override;
  TokenIds EncodeWithSpecials(std::string_view text) const override;
  std::string_view TokenBytes(TokenId id) const override;
  std::optional<TokenId> FindSpecial(std::string_view name) const override;
  std::optional<std::string_view> SpecialName(TokenId id) const override;
  int32_t vocab_size() const override { return vocab_size_; }

  // HF's "special" flag of an added token (false for ordinary ids and Cedar's extras).
  bool IsHfSpecial(TokenId id) const;
  // tokenizer_config.json's bos_token / eos_token, when declared and known.
  std::optional<TokenId> bos_id() const { return bos_; }
  std::optional<TokenId> eos_id() const { return eos_; }
  // One past the largest id tokenizer.json defines (before extra_specials).
  int32_t tokenizer_size() const { return tokenizer_size_; }
  size_t added_tokens() const { return added_.size(); }

 private:
  BpeTokenizer() = default;
  // Appends the ids of plain text (valid UTF-8): pre-tokenize, then BPE each piece.
  void EncodePlain(std::string_view text, TokenIds& out) const;

  PreTokenizer pre_;
  BpeModel bpe_;
  bool ignore_merges_ = false;                      // HF: a piece that is a vocab entry is kept whole
  std::unordered_map<std::string, TokenId> vocab_;  // raw bytes -> id (ordinary ids)
  std::vector<std::string> bytes_;                  // id -> raw bytes ("" for non-ordinary)
  std::vector<AddedToken> added_;                   // tokenizer.json's added tokens (+ config's)
  AddedTokenMatcher matcher_;
  std::unordered_map<std::string, TokenId> special_ids_;      // name -> id (added + extras)
  std::unordered_map<TokenId, std::string> special_names_;    // id -> name
  std::unordered_map<TokenId, bool> hf_special_;              // id -> HF special flag
  int32_t tokenizer_size_ = 0;
  int32_t vocab_size_ = 0;
  std::optional<TokenId> bos_, eos_;
};

}  // namespace cedar::bridge
