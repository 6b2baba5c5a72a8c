// The Engram token -> class table of DeepSeek-V4.1-Flash. The released checkpoint does not store
// it (layers 1 and 14 hold 6 Engram tensors each, none of them a map: docs/v41-contract.md,
// "Engram"); the released engram.py builds it from the tokenizer at start-up:
//   for every token id in order: text = the tokenizer's decode([id]) (special tokens kept);
//   key  = the raw vocabulary string when text holds U+FFFD (a partial UTF-8 byte token), else
//          Normalise(text), or text itself when that is empty;
//   class = the number of distinct keys seen before the key's first appearance.
// Normalise is the HF `tokenizers` normaliser sequence NFKC, NFD, StripAccents (drops
// General_Category=Mark), Lowercase, Replace([ \t\r\n]+ -> " "), a text that is exactly " " kept,
// Strip (Unicode White_Space at both ends). ICU does the Unicode work; without ICU in the build
// the functions that need it throw (EngramClassesAvailable() says which).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cedar {

// True when this build has ICU (the normaliser); false: Normalise/FromTokenizerJson throw.
bool EngramClassesAvailable();

// The released normaliser on one UTF-8 text (throws std::invalid_argument on invalid UTF-8).
std::string EngramNormalizeText(const std::string& utf8);

// The table from per-id texts: decoded[i] (UTF-8 with U+FFFD where decoding failed) and raw[i]
// (the vocabulary string). Sets *n_classes to the number of distinct keys.
std::vector<int32_t> EngramClassesFromTexts(const std::vector<std::string>& decoded, const std::vector<std::string>& raw,
                                            int64_t* n_classes);

// The table of a byte-level BPE tokenizer.json (the released tokenizer: model.vocab and
// added_tokens, decoder ByteLevel). Ids up to the largest id the file names are decoded as
// HF decode([id]) does (a token whose every character is a byte-level symbol becomes those
// bytes, otherwise its own UTF-8; bytes decoded lossily); an id the file does not name
// decodes to "". Ids from there to vocab_size (the checkpoint's padded rows, which the tokenizer
// never emits) get the class of `pad_id`. Throws std::runtime_error naming the file and field.
std::vector<int32_t> EngramClassesFromTokenizerJson(const std::string& path, int vocab_size, int pad_id, int64_t* n_classes);

}  // namespace cedar
