// Tokenizer: text <-> token ids. `Tokenizer` is the interface the chat template and the
// tool-call parser use; `ByteTokenizer` is the byte-level implementation our tiny models are
// trained with; `BpeTokenizer` (bpe_tokenizer.h) reads a Hugging Face tokenizer.json (the
// released model's). model_tokenizer.h picks the one a model's config.json declares.
//
// Rules every implementation keeps:
//   - Encode(text) never yields a special id: a literal "<|user|>" in user text is ordinary
//     text. Special ids are only ever placed by the chat template, by id. EncodeWithSpecials
//     is the exception, for callers that render a whole prompt as one string (as Hugging
//     Face's encode does): it turns special names found in the text into their ids.
//   - Every id in [0, vocab_size()) is one of: ordinary (stands for a byte string, possibly
//     part of a UTF-8 character), special (has a name), or unused (stands for nothing).
//
// Thread contract: a Tokenizer is immutable after construction; its const methods may be
// called from any thread. StreamDecoder holds per-stream state and belongs to one thread.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tools_bridge/lib/added_tokens.h"
#include "tools_bridge/lib/utf8.h"

namespace cedar::bridge {

using TokenId = int32_t;
using TokenIds = std::vector<TokenId>;

// The special tokens the chat template needs (see chat_template.h for where each goes).
inline constexpr std::string_view kBosToken = "<|bos|>";                 // start of a prompt
inline constexpr std::string_view kEosToken = "<|eos|>";                 // end of generation
inline constexpr std::string_view kSystemToken = "<|system|>";           // opens a system message
inline constexpr std::string_view kUserToken = "<|user|>";               // opens a user message
inline constexpr std::string_view kAssistantToken = "<|assistant|>";     // opens an assistant msg
inline constexpr std::string_view kToolToken = "<|tool|>";               // opens a tool result
inline constexpr std::string_view kToolCallToken = "<|tool_call|>";      // opens a tool call
inline constexpr std::string_view kToolCallEndToken = "<|/tool_call|>";  // closes a tool call
inline constexpr std::string_view kEndToken = "<|end|>";                 // closes any message
inline constexpr std::string_view kToolsToken = "<|tools|>";             // opens the tool schemas

// ByteTokenizer gives these ids 256, 257, ... in this order.
inline constexpr std::array<std::string_view, 10> kChatSpecialTokens = {
    kBosToken,  kEosToken,      kSystemToken,      kUserToken, kAssistantToken,
    kToolToken, kToolCallToken, kToolCallEndToken, kEndToken,  kToolsToken};

// How Decode and StreamDecoder show special ids.
enum class SpecialText {
  kName,  // as their name, e.g. "<|end|>" (for logs and debugging)
  kSkip,  // not at all
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ordinary ids for `text` (any bytes; need not be valid UTF-8). Never special ids.
  virtual TokenIds Encode(std::string_view text) const = 0;
  // Like Encode, but a special token's name in `text` becomes its id (leftmost, longest
  // match first). The default knows no names and is Encode.
  virtual TokenIds EncodeWithSpecials(std::string_view text) const { return Encode(text); }
  // The bytes an ordinary id stands for; empty for special and unused ids.
  // REQUIRES: 0 <= id < vocab_size().
  virtual std::string_view TokenBytes(TokenId id) const = 0;
  // The id of the special token `name`, if this tokenizer has it.
  virtual std::optional<TokenId> FindSpecial(std::string_view name) const = 0;
  // The name of `id` when it is special; nullopt for ordinary, unused and out-of-range ids.
  virtual std::optional<std::string_view> SpecialName(TokenId id) const = 0;
  // Number of ids the model scores; every id this tokenizer produces is below it.
  virtual int32_t vocab_size() const = 0;

  // The id of the special token `name`; throws std::invalid_argument naming it if absent.
  TokenId SpecialId(std::string_view name) const;
  bool IsSpecial(TokenId id) const { return SpecialName(id).has_value(); }
  bool InVocab(TokenId id) const { return id >= 0 && id < vocab_size(); }
  // Text of `ids`: ordinary bytes joined, then repaired to valid UTF-8 (ill-formed parts
  // become U+FFFD); special ids shown as `specials` says. Equals what a StreamDecoder fed the
  // same ids produces. Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string Decode(std::span<const TokenId> ids, SpecialText specials = SpecialText::kName) const;
};

// Decodes ids one at a time for streaming: each Push returns the text that is now complete,
// holding back a UTF-8 character until its last byte arrives, so no chunk ever ends inside a
// character. The concatenation of every Push and Finish equals Tokenizer::Decode of all ids.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, SpecialText specials = SpecialText::kName)
      : tokenizer_(tokenizer), specials_(specials) {}

  // Text completed by `id` (often empty). Throws std::out_of_range for an id outside the vocab.
  std::string Push(TokenId id);
  // End of the stream: a held-back unfinished character comes out as U+FFFD.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  SpecialText specials_;
  Utf8Assembler utf8_;
};

// Ids 0..255 are the bytes 0x00..0xFF. Special ids start at 256: kChatSpecialTokens in order
// (<|bos|> = 256 ... <|tools|> = 265), then `extra_specials` in order. Ids from there up to
// vocab_size are unused (a model may have a padded vocab).
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr TokenId kFirstSpecialId = 256;

  // Throws std::invalid_argument when vocab_size < 256 + number of specials, or when an extra
  // special name is empty or repeats another name.
  explicit ByteTokenizer(int32_t vocab_size = 512, std::vector<std::string> extra_specials = {});

  TokenIds Encode(std::string_view text) const override;
  TokenIds EncodeWithSpecials(std::string_view text) const override;
  std::string_view TokenBytes(TokenId id) const override;
  std::optional<TokenId> FindSpecial(std::string_view name) const override;
  std::optional<std::string_view> SpecialName(TokenId id) const override;
  int32_t vocab_size() const override { return vocab_size_; }

 private:
  int32_t vocab_size_;
  AddedTokenMatcher matcher_;          // finds the special names for EncodeWithSpecials
  std::vector<std::string> specials_;  // specials_[i] is the name of id 256 + i
  std::array<char, 256> bytes_;        // bytes_[b] == b, so TokenBytes can return a view
};

}  // namespace cedar::bridge
