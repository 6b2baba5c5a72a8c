// The Engram token -> class table (see engram_classes.h for the rule and its sources).
#include "engine/engram_classes.h"

#include <fstream>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#ifdef CEDAR_HAVE_ICU
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#endif

namespace cedar {

namespace {

const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF), as Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8") accept it.
bool ValidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + size_t(len) > n) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int k = 2; k < len; ++k)
      if (p[i + size_t(k)] < 0x80 || p[i + size_t(k)] > 0xBF) return false;
    i += size_t(len);
  }
  return true;
}

// GPT-2's byte-level alphabet: byte b is shown as code point Symbol(b); the printable bytes
// 33..126, 161..172, 174..255 as themselves, the other 68 as 256, 257, ... in byte order.
std::unordered_map<uint32_t, uint8_t> ByteLevelInverse() {
  std::unordered_map<uint32_t, uint8_t> inv;
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    inv[printable ? b : 256 + extra++] = uint8_t(b);
  }
  return inv;
}

// Code points of valid UTF-8.
std::vector<uint32_t> CodePoints(const std::string& s) {
  std::vector<uint32_t> out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned c = p[i];
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len && i + size_t(k) < s.size(); ++k) cp = (cp << 6) | (p[i + size_t(k)] & 0x3F);
    out.push_back(cp);
    i += size_t(len);
  }
  return out;
}

// HF decode([id]) of a byte-level token: its bytes when every character is a byte symbol, else
// the token's own UTF-8 (added tokens such as "<｜begin▁of▁sentence｜>"); invalid UTF-8 becomes
// U+FFFD (only whether one appears matters to the class key).
std::string ByteLevelDecode(const std::string& token, const std::unordered_map<uint32_t, uint8_t>& inv) {
  std::string bytes;
  for (uint32_t cp : CodePoints(token)) {
    auto it = inv.find(cp);
    if (it == inv.end()) return token;
    bytes.push_back(char(it->second));
  }
  if (ValidUtf8(bytes)) return bytes;
  std::string lossy;
  for (unsigned char b : bytes) lossy += b < 0x80 ? std::string(1, char(b)) : std::string(kReplacement);
  return lossy;
}

}  // namespace

#ifdef CEDAR_HAVE_ICU

bool EngramClassesAvailable() { return true; }

std::string EngramNormalizeText(const std::string& utf8) {
  if (!ValidUtf8(utf8)) throw std::invalid_argument("EngramNormalizeText: expected UTF-8 text, found invalid bytes");
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalizers unavailable: ") + u_errorName(err));
  icu::UnicodeString s = nfd->normalize(nfkc->normalize(icu::UnicodeString::fromUTF8(utf8), err), err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalisation failed: ") + u_errorName(err));
  // StripAccents (every General_Category=Mark), then Lowercase one character at a time: HF's
  // NormalizedString::lowercase maps each char with Rust's char::to_lowercase (full mappings,
  // no context, so a final capital sigma becomes σ, not ς).
  icu::UnicodeString low;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    const int8_t t = u_charType(c);
    if (t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK) continue;
    icu::UnicodeString one(c);
    low.append(one.toLower(icu::Locale::getRoot()));
  }
  // Runs of [ \t\r\n] -> one space; a text that is exactly " " stays; else strip White_Space.
  icu::UnicodeString sp;
  bool in_run = false;
  for (int32_t i = 0; i < low.length();) {
    const UChar32 c = low.char32At(i);
    i += U16_LENGTH(c);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (!in_run) sp.append(UChar32(' '));
      in_run = true;
    } else {
      sp.append(c);
      in_run = false;
    }
  }
  if (sp == icu::UnicodeString(u" ")) return " ";
  int32_t b = 0, e = sp.length();  // White_Space is all in the BMP: no surrogate is stripped
  while (b < e && u_isUWhiteSpace(sp.char32At(b))) b += U16_LENGTH(sp.char32At(b));
  while (e > b && u_isUWhiteSpace(sp.char32At(e - 1))) e -= U16_LENGTH(sp.char32At(e - 1));
  std::string out;
  sp.tempSubStringBetween(b, e).toUTF8String(out);
  return out;
}

#else

bool EngramClassesAvailable() { return false; }

std::string EngramNormalizeText(const std::string&) {
  throw std::runtime_error("the Engram token normaliser needs ICU, and this build has none (install libicu-dev and reconfigure)");
}

#endif

std::vector<int32_t> EngramClassesFromTexts(const std::vector<std::string>& decoded, const std::vector<std::string>& raw,
                                            int64_t* n_classes) {
  if (decoded.size() != raw.size())
    throw std::invalid_argument("EngramClassesFromTexts: expected as many raw strings as decoded texts (" + std::to_string(decoded.size()) +
                                "), found " + std::to_string(raw.size()));
  std::unordered_map<std::string, int32_t> keys;
  std::vector<int32_t> out(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    std::string key;
    if (decoded[i].find(kReplacement) != std::string::npos) {
      key = raw[i];
    } else {
      key = EngramNormalizeText(decoded[i]);
      if (key.empty()) key = decoded[i];
    }
    out[i] = keys.emplace(std::move(key), int32_t(keys.size())).first->second;
  }
  if (n_classes) *n_classes = int64_t(keys.size());
  return out;
}

std::vector<int32_t> EngramClassesFromTokenizerJson(const std::string& path, int vocab_size, int pad_id, int64_t* n_classes) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open the tokenizer for the Engram class table");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + std::string(e.what()));
  }
  const nlohmann::json* dec = j.contains("decoder") ? &j["decoder"] : nullptr;
  bool byte_level = dec && dec->is_object() && dec->value("type", "") == "ByteLevel";
  if (dec && dec->is_object() && dec->value("type", "") == "Sequence" && dec->contains("decoders"))
    for (const auto& d : (*dec)["decoders"]) byte_level = byte_level || (d.is_object() && d.value("type", "") == "ByteLevel");
  if (!byte_level)
    throw std::runtime_error(path + ": decoder: expected ByteLevel (the released byte-level BPE), found " + (dec ? dec->dump().substr(0, 80) : "none"));
  if (!j.contains("model") || !j["model"].contains("vocab") || !j["model"]["vocab"].is_object())
    throw std::runtime_error(path + ": model.vocab: expected an object {token: id}");
  std::vector<std::string> raw;
  auto put = [&](int64_t id, const std::string& tok) {
    if (id < 0 || id >= vocab_size)
      throw std::runtime_error(path + ": token '" + tok + "': expected an id below vocab_size " + std::to_string(vocab_size) + ", found " +
                               std::to_string(id));
    if (size_t(id) >= raw.size()) raw.resize(size_t(id) + 1);
    raw[size_t(id)] = tok;
  };
  for (auto& [tok, id] : j["model"]["vocab"].items()) put(id.get<int64_t>(), tok);
  if (j.contains("added_tokens"))
    for (const auto& a : j["added_tokens"]) put(a.at("id").get<int64_t>(), a.at("content").get<std::string>());
  const auto inv = ByteLevelInverse();
  std::vector<std::string> decoded(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) decoded[i] = ByteLevelDecode(raw[i], inv);
  std::vector<int32_t> cls = EngramClassesFromTexts(decoded, raw, n_classes);
  if (pad_id < 0 || size_t(pad_id) >= cls.size())
    throw std::runtime_error(path + ": engram pad id " + std::to_string(pad_id) + " is not a token of the file (ids 0.." + std::to_string(cls.size()) + ")");
  const int32_t pad_class = cls[size_t(pad_id)];
  spdlog::debug("engram classes from {}: {} token ids named, {} classes, {} padded ids -> pad class {}", path, cls.size(),
                n_classes ? *n_classes : -1, vocab_size - int64_t(cls.size()), pad_class);
  cls.resize(size_t(vocab_size), pad_class);
  return cls;
}

}  // namespace cedar
