#include "tools_bridge/lib/json_limits.h"

#include <algorithm>
#include <vector>

namespace cedar::bridge {
namespace {

using nlohmann::json;

// Keys longer than this are cut in paths (a path names where, it need not be exact).
constexpr size_t kPathKeyChars = 40;

// Builds the tree through nlohmann's own DOM builder (the one json::parse uses) while
// tracking depth and path; any event past the depth limit returns false, which makes the
// parser stop at once.
class BoundedSax {
 public:
  BoundedSax(json& root, std::string_view text, int max_depth)
      : dom_(root, /*allow_exceptions=*/false), text_(text), max_depth_(max_depth) {}

  bool null() { return Scalar() && dom_.null(); }
  bool boolean(bool v) { return Scalar() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return Scalar() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Scalar() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return Scalar() && dom_.number_float(v, s); }
  bool string(json::string_t& v) { return Scalar() && dom_.string(v); }
  bool binary(json::binary_t& v) { return Scalar() && dom_.binary(v); }
  bool start_object(size_t n) { return Open(false) && dom_.start_object(n); }
  bool start_array(size_t n) { return Open(true) && dom_.start_array(n); }
  bool key(json::string_t& k) {
    frames_.back().key = k.size() > kPathKeyChars ? Clip(k, kPathKeyChars) : k;
    if (frames_.size() == 1) top_key_ = k;
    return dom_.key(k);
  }
  bool end_object() { return Close() && dom_.end_object(); }
  bool end_array() { return Close() && dom_.end_array(); }

  // `position` counts the bytes read, the failing one included (end of input counts as one).
  template <class Exception>
  bool parse_error(size_t position, const std::string& last_token, const Exception& ex) {
    const size_t at = position == 0 ? 0 : std::min(position - 1, text_.size());
    // 406: a number that does not fit a double (the lexer read it as +-inf).
    if (ex.id == 406) {
      Fail(JsonParseError::Kind::kNumberOutOfRange, at,
           "the number " + Clip(last_token, 40) + " is out of range (|x| must be below 1.8e308)");
    } else {
      Fail(JsonParseError::Kind::kSyntax, at, SyntaxProblem(at, last_token));
    }
    return false;
  }

  const std::optional<JsonParseError>& error() const { return error_; }

 private:
  struct Frame {
    bool array = false;
    size_t next = 0;   // arrays: elements started so far
    std::string key;   // objects: the key just read
  };

  // A value starts: in an array it is the next element.
  void Element() {
    if (!frames_.empty() && frames_.back().array) frames_.back().next++;
  }
  bool Scalar() {
    Element();
    return true;
  }
  bool Open(bool array) {
    if (int(frames_.size()) + 1 > max_depth_) {
      Fail(JsonParseError::Kind::kTooDeep, 0,
           "nesting deeper than " + std::to_string(max_depth_) + " levels (the limit)");
      return false;
    }
    Element();
    frames_.push_back(Frame{array, 0, {}});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }

  // The path of the value being read: an array's current element is its last started one,
  // except in the innermost frame where an error comes before the element starts.
  std::string Path() const {
    std::string p;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool innermost = i + 1 == frames_.size();
      if (f.array) {
        const size_t index = innermost ? f.next : (f.next == 0 ? 0 : f.next - 1);
        p += "[" + std::to_string(index) + "]";
      } else if (!f.key.empty() || !innermost) {
        if (!p.empty()) p += ".";
        p += f.key;
      }
    }
    return p;
  }

  // What went wrong at byte `at`, told from the bytes there (the library's token text is not
  // just the last token, so it is only used to spot an escape).
  std::string SyntaxProblem(size_t at, const std::string& token) const {
    if (at >= text_.size()) return "unexpected end of input";
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[i]); };
    if (byte(at) < 0x20) return "a control character (" + Hex(byte(at)) + ") must be escaped in a string";
    // An ill-formed UTF-8 sequence is detected at its first bad byte or the one after it.
    if (byte(at) >= 0x80 || (at > 0 && byte(at - 1) >= 0x80)) return "invalid UTF-8";
    if (!token.empty() && token[0] == '"' && token.find('\\') != std::string::npos) {
      return "a bad escape in a string (\\u escapes must not leave a surrogate unpaired)";
    }
    std::string near;
    for (unsigned char c : text_.substr(at, 12)) near += c >= 0x20 && c < 0x7f ? std::string(1, char(c)) : Hex(c);
    return "unexpected '" + near + "'";
  }

  static std::string Hex(unsigned char c) {
    static const char* kHex = "0123456789ABCDEF";
    return std::string("0x") + kHex[c >> 4] + kHex[c & 15];
  }

  void Fail(JsonParseError::Kind kind, size_t position, const std::string& what) {
    if (error_) return;
    JsonParseError e;
    e.kind = kind;
    e.offset = position;
    e.path = Path();
    e.top_key = frames_.empty() || frames_[0].array ? std::string() : top_key_;
    e.message = (e.path.empty() ? std::string() : Clip(e.path, 100) + ": ") + what;
    if (kind != JsonParseError::Kind::kTooDeep) e.message += " (at byte " + std::to_string(position) + ")";
    error_ = std::move(e);
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::string_view text_;
  int max_depth_;
  std::vector<Frame> frames_;  // open containers, outermost first (at most max_depth_)
  std::string top_key_;        // the top-level object's current key, uncut
  std::optional<JsonParseError> error_;
};

void Preview(const json& v, int depth, int max_depth, size_t budget, std::string& out) {
  if (out.size() > budget) return;
  switch (v.type()) {
    case json::value_t::array: {
      if (depth >= max_depth && !v.empty()) {
        out += "[...]";
        return;
      }
      out += "[";
      bool first = true;
      for (const json& e : v) {
        if (out.size() > budget) return;
        if (!first) out += ",";
        first = false;
        Preview(e, depth + 1, max_depth, budget, out);
      }
      out += "]";
      return;
    }
    case json::value_t::object: {
      if (depth >= max_depth && !v.empty()) {
        out += "{...}";
        return;
      }
      out += "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (out.size() > budget) return;
        if (!first) out += ",";
        first = false;
        out += json(Clip(it.key(), budget)).dump(-1, ' ', false, json::error_handler_t::replace) + ":";
        Preview(it.value(), depth + 1, max_depth, budget, out);
      }
      out += "}";
      return;
    }
    case json::value_t::string:
      out += json(Clip(v.get_ref<const std::string&>(), budget)).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    default:  // scalars: short, no recursion
      out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

JsonParseResult ParseJsonBounded(std::string_view text, int max_depth) {
  JsonParseResult r;
  BoundedSax sax(r.value, text, max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception&) {
    ok = false;  // not expected (the DOM builder does not throw here); refuse rather than crash
  }
  if (ok && !sax.error()) return r;
  r.value = json(json::value_t::discarded);
  if (sax.error()) {
    r.error = sax.error();
  } else {
    r.error = JsonParseError{JsonParseError::Kind::kSyntax, 0, "", "", "not valid JSON"};
  }
  return r;
}

std::string JsonPreview(const json& value, size_t max_chars, int max_depth) {
  std::string out;
  Preview(value, 0, max_depth, max_chars, out);
  return out.size() > max_chars ? Clip(out, max_chars > 3 ? max_chars - 3 : max_chars) : out;
}

std::string Clip(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(text.substr(0, cut)) + "...";
}

}  // namespace cedar::bridge
