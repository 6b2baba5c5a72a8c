#include "tools_bridge/lib/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "tools_bridge/lib/byte_level.h"
#include "tools_bridge/lib/utf8.h"

namespace cedar::bridge {
namespace {

using json = nlohmann::json;

[[noreturn]] void Bad(const std::string& what) { throw std::invalid_argument("tokenizer.json: " + what); }

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // Fast path over 8 ASCII bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const auto c = uint8_t(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    auto at = [&](size_t k) { return i + k < n ? uint8_t(s[i + k]) : uint8_t(0); };
    auto cont = [](uint8_t b) { return (b & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(at(1))) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      if (at(1) < lo || at(1) > hi || !cont(at(2))) return false;
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      if (at(1) < lo || at(1) > hi || !cont(at(2)) || !cont(at(3))) return false;
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

std::string TokenContent(const json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  return "";
}

AddedToken ParseAdded(const json& t, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = t.at("content").get<std::string>();
  a.special = t.value("special", false);
  a.normalized = t.value("normalized", !a.special);  // HF's default
  a.lstrip = t.value("lstrip", false);
  a.rstrip = t.value("rstrip", false);
  if (t.value("single_word", false)) {
    Bad("added token " + json(a.content).dump() + ": single_word is not supported");
  }
  return a;
}

void CheckSupported(const json& tj) {
  const json& norm = tj.value("normalizer", json());
  if (!norm.is_null() && !(norm.value("type", "") == "Sequence" && norm.value("normalizers", json::array()).empty())) {
    Bad("normalizer " + norm.dump().substr(0, 80) + " is not supported (expected null or an empty Sequence)");
  }
  const json& dec = tj.value("decoder", json());
  if (!dec.is_null() && dec.value("type", "") != "ByteLevel") {
    Bad("decoder " + dec.value("type", std::string("?")) + " is not supported (expected ByteLevel)");
  }
  const json& m = tj.at("model");
  if (m.value("type", std::string("BPE")) != "BPE") Bad("model type " + m["type"].dump() + " is not BPE");
  if (!m.value("dropout", json()).is_null()) Bad("BPE dropout is not supported");
  if (m.value("byte_fallback", false)) Bad("BPE byte_fallback is not supported (byte-level BPE needs none)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& v = m.value(k, json());
    if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) {
      Bad(std::string("BPE ") + k + " is not supported");
    }
  }
}

// A merge entry: "a b" (older files) or ["a", "b"] (newer ones).
std::pair<std::string, std::string> MergePair(const json& m, size_t rank) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t sp = s.find(' ', 1);
    if (sp == std::string::npos) Bad("merge " + std::to_string(rank) + " " + m.dump() + " has no space");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (m.is_array() && m.size() == 2) return {m[0].get<std::string>(), m[1].get<std::string>()};
  Bad("merge " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
}

json ReadJson(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw std::runtime_error(path + " is not valid JSON: " + e.what());
  }
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::FromDir(const std::string& dir, BpeTokenizerOptions options) {
  const json tj = ReadJson(dir + "/tokenizer.json");
  json cfg;
  if (std::ifstream(dir + "/tokenizer_config.json").good()) cfg = ReadJson(dir + "/tokenizer_config.json");
  try {
    return FromJson(tj, cfg, std::move(options));
  } catch (const std::exception& e) {
    throw std::runtime_error(dir + "/" + e.what());
  }
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::FromJson(const json& tj, const json& cfg, BpeTokenizerOptions options) {
  if (!tj.is_object() || !tj.contains("model")) Bad("expected an object with a \"model\"");
  CheckSupported(tj);
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->pre_ = PreTokenizer::FromJson(tj.value("pre_tokenizer", json()));
  const json& model = tj["model"];
  t->ignore_merges_ = model.value("ignore_merges", false);

  // Added tokens: tokenizer.json's, then tokenizer_config.json's added_tokens_decoder entries
  // it lacks (transformers adds those too).
  std::unordered_map<int32_t, size_t> added_at;
  for (const json& a : tj.value("added_tokens", json::array())) {
    added_at[a.at("id").get<int32_t>()] = t->added_.size();
    t->added_.push_back(ParseAdded(a, a["id"].get<int32_t>()));
  }
  if (cfg.is_object() && cfg.contains("added_tokens_decoder")) {
    for (const auto& [key, a] : cfg["added_tokens_decoder"].items()) {
      const int32_t id = std::stoi(key);
      if (added_at.count(id)) continue;
      added_at[id] = t->added_.size();
      t->added_.push_back(ParseAdded(a, id));
    }
  }

  // Vocabulary: byte-level strings -> raw bytes.
  const json& vocab = model.at("vocab");
  int32_t max_id = -1;
  for (const auto& [tok, idj] : vocab.items()) max_id = std::max(max_id, idj.get<int32_t>());
  for (const AddedToken& a : t->added_) max_id = std::max(max_id, a.id);
  if (max_id < 0) Bad("empty vocabulary");
  t->tokenizer_size_ = max_id + 1;
  t->bytes_.assign(size_t(max_id) + 1, std::string());
  std::vector<int32_t> byte_ids(256, -1);
  std::unordered_map<std::string, int32_t> by_string;  // tokenizer.json string -> id, for merges
  by_string.reserve(vocab.size());
  for (const auto& [tok, idj] : vocab.items()) {
    const int32_t id = idj.get<int32_t>();
    if (id < 0) Bad("vocab entry " + json(tok).dump() + " has a negative id");
    by_string.emplace(tok, id);
    if (added_at.count(id)) continue;  // an added token's id is special, not ordinary
    // A string outside the byte alphabet stands for its own UTF-8 (HF's decoder does the same).
    std::string raw = ByteLevelDecode(tok).value_or(tok);
    if (raw.size() == 1) byte_ids[uint8_t(raw[0])] = id;
    t->vocab_.emplace(raw, id);
    t->bytes_[id] = std::move(raw);
  }

  // Merges, in rank order, as ids.
  std::vector<std::array<int32_t, 3>> merges;
  const json& mj = model.value("merges", json::array());
  merges.reserve(mj.size());
  for (size_t r = 0; r < mj.size(); ++r) {
    auto [a, b] = MergePair(mj[r], r);
    auto ia = by_string.find(a), ib = by_string.find(b), im = by_string.find(a + b);
    if (ia == by_string.end() || ib == by_string.end() || im == by_string.end()) {
      Bad("merge " + std::to_string(r) + " (" + json(a).dump() + ", " + json(b).dump() +
          ") names a token missing from the vocab");
    }
    merges.push_back({ia->second, ib->second, im->second});
  }
  t->bpe_ = BpeModel(std::move(byte_ids), merges);
  t->matcher_ = AddedTokenMatcher(t->added_);
  for (const AddedToken& a : t->added_) {
    t->special_ids_.emplace(a.content, a.id);
    t->special_names_[a.id] = a.content;
    t->hf_special_[a.id] = a.special;
  }

  // Cedar's extra specials after the tokenizer's ids.
  int32_t next = t->tokenizer_size_;
  if (options.extra_specials_optional && options.vocab_size > 0) {
    int32_t missing = 0;
    for (const std::string& name : options.extra_specials) missing += !t->special_ids_.count(name);
    if (next + missing > options.vocab_size) {
      spdlog::debug("bpe tokenizer: no room for {} extra specials ({} ids used of {})", missing, next,
                    options.vocab_size);
      options.extra_specials.clear();
    }
  }
  for (const std::string& name : options.extra_specials) {
    if (name.empty()) throw std::invalid_argument("BpeTokenizer: empty extra special name");
    if (t->special_ids_.count(name)) continue;
    t->special_ids_.emplace(name, next);
    t->special_names_[next] = name;
    ++next;
  }
  t->vocab_size_ = options.vocab_size > 0 ? options.vocab_size : next;
  if (t->vocab_size_ < next) {
    throw std::invalid_argument("BpeTokenizer: vocab_size " + std::to_string(options.vocab_size) +
                                " is smaller than the " + std::to_string(next) +
                                " ids the tokenizer (+ extra specials) needs");
  }
  if (cfg.is_object()) {
    if (auto it = t->special_ids_.find(TokenContent(cfg.value("bos_token", json()))); it != t->special_ids_.end()) t->bos_ = it->second;
    if (auto it = t->special_ids_.find(TokenContent(cfg.value("eos_token", json()))); it != t->special_ids_.end()) t->eos_ = it->second;
  }
  spdlog::debug("bpe tokenizer: {} ordinary ids, {} merges, {} added tokens, {} pre-tokenizer steps, "
                "{} extra specials, vocab_size {}",
                t->vocab_.size(), t->bpe_.merges(), t->added_.size(), t->pre_.steps(),
                next - t->tokenizer_size_, t->vocab_size_);
  return t;
}

namespace {

// The per-call word cache: open addressing over views into the text being encoded, each
// remembering where its ids first went in the output. Lives per thread and is cleared per
// call, so encoding allocates nothing per piece.
class WordCache {
 public:
  struct Entry {
    const char* data;  // nullptr: empty slot
    uint32_t size;
    uint32_t offset;  // ids at out[offset, offset + count)
    uint32_t count;
  };
  void Reset(size_t pieces) {
    size_t cap = 64;
    while (cap < pieces * 2) cap <<= 1;
    if (slots_.size() < cap || slots_.size() > 4 * cap) slots_.assign(cap, Entry{});
    else std::fill(slots_.begin(), slots_.end(), Entry{});
    mask_ = slots_.size() - 1;
  }
  // The entry for `word`: found (data set) or the empty slot to fill.
  Entry& Find(std::string_view word) {
    size_t i = size_t(XXH3_64bits(word.data(), word.size())) & mask_;
    while (true) {
      Entry& e = slots_[i];
      if (!e.data || (e.size == word.size() && std::memcmp(e.data, word.data(), word.size()) == 0)) return e;
      i = (i + 1) & mask_;
    }
  }

 private:
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

}  // namespace

void BpeTokenizer::EncodePlain(std::string_view text, TokenIds& out) const {
  thread_local std::vector<std::string_view> pieces;
  thread_local WordCache cache;
  pieces.clear();
  pre_.Split(text, pieces);
  // A piece seen before copies the ids its first occurrence appended to `out` (out only grows,
  // so [offset, offset + count) stays valid). Long tool outputs repeat words a lot.
  cache.Reset(pieces.size());
  for (std::string_view p : pieces) {
    if (p.size() == 1) {
      bpe_.EncodeWord(p, out);
      continue;
    }
    WordCache::Entry& e = cache.Find(p);
    if (e.data) {
      out.insert(out.end(), out.begin() + e.offset, out.begin() + e.offset + e.count);
      continue;
    }
    const size_t before = out.size();
    auto whole = ignore_merges_ ? vocab_.find(std::string(p)) : vocab_.end();
    if (whole != vocab_.end()) {
      out.push_back(whole->second);
    } else {
      bpe_.EncodeWord(p, out);
    }
    e = WordCache::Entry{p.data(), uint32_t(p.size()), uint32_t(before), uint32_t(out.size() - before)};
  }
}

TokenIds BpeTokenizer::Encode(std::string_view text) const {
  TokenIds out;
  out.reserve(text.size() / 3 + 8);
  if (ValidUtf8(text)) {
    EncodePlain(text, out);
  } else {
    EncodePlain(RepairUtf8(text), out);
  }
  return out;
}

TokenIds BpeTokenizer::EncodeWithSpecials(std::string_view text) const {
  std::string repaired;
  if (!ValidUtf8(text)) {
    repaired = RepairUtf8(text);
    text = repaired;
  }
  TokenIds out;
  out.reserve(text.size() / 3 + 8);
  std::vector<AddedTokenMatcher::Part> parts;
  matcher_.Split(text, parts);
  for (const auto& p : parts) {
    if (p.id >= 0) {
      out.push_back(p.id);
    } else {
      EncodePlain(p.text, out);
    }
  }
  return out;
}

std::string_view BpeTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= int32_t(bytes_.size())) return {};
  return bytes_[size_t(id)];
}

std::optional<TokenId> BpeTokenizer::FindSpecial(std::string_view name) const {
  auto it = special_ids_.find(std::string(name));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeTokenizer::SpecialName(TokenId id) const {
  auto it = special_names_.find(id);
  if (it == special_names_.end()) return std::nullopt;
  return std::string_view(it->second);
}

bool BpeTokenizer::IsHfSpecial(TokenId id) const {
  auto it = hf_special_.find(id);
  return it != hf_special_.end() && it->second;
}

}  // namespace cedar::bridge
