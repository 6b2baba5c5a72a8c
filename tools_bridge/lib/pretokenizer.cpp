#include "tools_bridge/lib/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace cedar::bridge {
namespace {

using json = nlohmann::json;

// GPT-2's split, which ByteLevel applies when use_regex is true (as HF's ByteLevel does).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match data and JIT stack: neither is tied to a pattern, so one set serves every
// pre-tokenizer on the thread and Split allocates nothing per call.
struct ThreadScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch s;
  return s;
}

size_t Utf8Len(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

}  // namespace

std::string TranslatePattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      auto put = [&](std::string_view in, std::string_view out_of_class) {
        out += in_class ? in : out_of_class;
      };
      switch (e) {
        case 's': put("\\p{White_Space}", "\\p{White_Space}"); break;
        case 'S': put("\\P{White_Space}", "\\P{White_Space}"); break;
        case 'd': put("\\p{Nd}", "\\p{Nd}"); break;
        case 'w': put("\\p{L}\\p{M}\\p{Nd}\\p{Pc}", "[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]"); break;
        case 'D':
        case 'W':
          if (in_class) {
            throw std::invalid_argument(std::string("pre-tokenizer pattern: \\") + e +
                                        " inside a character class is not supported");
          }
          out += e == 'D' ? "\\P{Nd}" : "[^\\p{L}\\p{M}\\p{Nd}\\p{Pc}]";
          break;
        default: out += '\\'; out += e; break;  // other escapes mean the same in PCRE2
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Step {
  pcre2_code* code = nullptr;
  bool jit = false;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  std::string source;  // the pattern as declared, for messages

  ~Step() { pcre2_code_free(code); }

  static std::unique_ptr<Step> Compile(std::string_view pattern, bool literal, Behavior behavior,
                                       bool invert) {
    auto s = std::make_unique<Step>();
    s->behavior = behavior;
    s->invert = invert;
    s->source = std::string(pattern);
    const std::string translated = literal ? std::string(pattern) : TranslatePattern(pattern);
    int err = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    s->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            options, &err, &offset, nullptr);
    if (!s->code) {
      throw std::invalid_argument("pre-tokenizer pattern " + json(s->source).dump() +
                                  " does not compile at offset " + std::to_string(offset) + ": " +
                                  Pcre2Message(err));
    }
    s->jit = pcre2_jit_compile(s->code, PCRE2_JIT_COMPLETE) == 0;
    if (!s->jit) spdlog::debug("pre-tokenizer: no JIT for {}, using the interpreter", s->source);
    return s;
  }

  // Next match of the pattern in `text` at or after `from`: [start, end). False when none.
  bool Find(std::string_view text, size_t from, size_t& start, size_t& end) const {
    ThreadScratch& t = Scratch();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    int rc = pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, t.data, t.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Pathological input for the JIT's stack: the interpreter keeps its frames on the heap.
      rc = pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       t.data, t.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      throw std::runtime_error("pre-tokenizer pattern " + json(source).dump() +
                               " failed to match: " + Pcre2Message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t.data);
    start = ov[0];
    end = ov[1];
    return true;
  }

  // Appends the pieces this step makes of `text`: the spans (gaps and matches, non-empty, in
  // order; `invert` swaps which is which), then HF's rule for the matches: Isolated keeps each
  // span, Removed drops matches, MergedWithPrevious / MergedWithNext join a match to the span
  // before / after it unless that span is itself a match (as HF folds them).
  void Split(std::string_view text, std::vector<std::string_view>& out) const {
    struct Span {
      size_t begin, end;
      bool match;
    };
    thread_local std::vector<Span> spans;
    spans.clear();
    size_t pos = 0, start = 0, end = 0, from = 0;
    while (from <= text.size() && Find(text, from, start, end)) {
      if (end == start) {  // an empty match splits nothing; step over one character
        if (start >= text.size()) break;
        from = start + Utf8Len(uint8_t(text[start]));
        continue;
      }
      if (start > pos) spans.push_back({pos, start, invert});
      spans.push_back({start, end, !invert});
      pos = from = end;
    }
    if (pos < text.size()) spans.push_back({pos, text.size(), invert});

    const size_t first = out.size();
    auto piece = [&](const Span& s) { return text.substr(s.begin, s.end - s.begin); };
    switch (behavior) {
      case Behavior::kIsolated:
        for (const Span& s : spans) out.push_back(piece(s));
        break;
      case Behavior::kRemoved:
        for (const Span& s : spans) {
          if (!s.match) out.push_back(piece(s));
        }
        break;
      case Behavior::kMergedWithPrevious: {
        // A match extends the piece before it, unless the span before it was a match too.
        bool previous_match = false;
        for (const Span& s : spans) {
          if (s.match && !previous_match && out.size() > first) {
            out.back() = std::string_view(out.back().data(), size_t(text.data() + s.end - out.back().data()));
          } else {
            out.push_back(piece(s));
          }
          previous_match = s.match;
        }
        break;
      }
      case Behavior::kMergedWithNext: {
        // The mirror image: walk backwards, a match extends the piece after it.
        bool previous_match = false;
        for (size_t i = spans.size(); i-- > 0;) {
          const Span& s = spans[i];
          if (s.match && !previous_match && out.size() > first) {
            out.back() = std::string_view(text.data() + s.begin, size_t(out.back().data() + out.back().size() -
                                                                        (text.data() + s.begin)));
          } else {
            out.push_back(piece(s));
          }
          previous_match = s.match;
        }
        std::reverse(out.begin() + std::ptrdiff_t(first), out.end());
        break;
      }
    }
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

namespace {

PreTokenizer::Behavior ParseBehavior(const json& j) {
  const std::string b = j.value("behavior", std::string("Isolated"));
  if (b == "Isolated") return PreTokenizer::Behavior::kIsolated;
  if (b == "Removed") return PreTokenizer::Behavior::kRemoved;
  if (b == "MergedWithPrevious") return PreTokenizer::Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return PreTokenizer::Behavior::kMergedWithNext;
  throw std::invalid_argument("pre_tokenizer Split: behavior " + json(b).dump() +
                              " is not supported (expected Isolated, Removed, "
                              "MergedWithPrevious or MergedWithNext)");
}

}  // namespace

PreTokenizer PreTokenizer::FromJson(const json& j) {
  PreTokenizer p;
  if (j.is_null()) return p;
  if (!j.is_object() || !j.contains("type")) {
    throw std::invalid_argument("pre_tokenizer: expected null or an object with a \"type\", found " +
                                j.dump().substr(0, 80));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const json& step : j.at("pretokenizers")) {
      PreTokenizer sub = FromJson(step);
      for (auto& s : sub.steps_) p.steps_.push_back(std::move(s));
    }
  } else if (type == "Split") {
    const json& pat = j.at("pattern");
    const bool literal = pat.contains("String");
    const std::string pattern = literal ? pat["String"].get<std::string>() : pat.at("Regex").get<std::string>();
    p.steps_.push_back(Step::Compile(pattern, literal, ParseBehavior(j), j.value("invert", false)));
  } else if (type == "ByteLevel") {
    // The byte-to-character mapping itself is the BPE model's job (Cedar's BPE runs on bytes).
    if (j.value("add_prefix_space", false)) {
      throw std::invalid_argument("pre_tokenizer ByteLevel: add_prefix_space true is not supported");
    }
    if (j.value("use_regex", true)) {
      p.steps_.push_back(Step::Compile(kGpt2Pattern, false, Behavior::kIsolated, false));
    }
  } else {
    throw std::invalid_argument("pre_tokenizer type " + json(type).dump() +
                                " is not supported (expected Sequence, Split or ByteLevel)");
  }
  return p;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    pieces.push_back(text);
    return;
  }
  // Breadth first: step k splits every piece step k-1 made. The two buffers live per thread
  // so a call allocates nothing once they have grown.
  thread_local std::vector<std::string_view> cur, next;
  cur.assign(1, text);
  for (size_t k = 0; k + 1 < steps_.size(); ++k) {
    next.clear();
    for (std::string_view p : cur) steps_[k]->Split(p, next);
    std::swap(cur, next);
  }
  for (std::string_view p : cur) steps_.back()->Split(p, pieces);
}

}  // namespace cedar::bridge
