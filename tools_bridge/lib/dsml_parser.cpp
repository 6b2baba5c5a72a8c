#include "tools_bridge/lib/dsml_parser.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/py_json.h"

namespace cedar::bridge::dsml {
namespace {

using ojson = nlohmann::ordered_json;

// Tags, in the V4.1 spaced spelling first and the V4 one second.
constexpr std::array<std::string_view, 2> kCallsOpeners = {"<｜DSML｜ calls>", "<｜DSML｜tool_calls>"};
constexpr std::array<std::string_view, 2> kCallsClosers = {"</｜DSML｜ calls>",
                                                           "</｜DSML｜tool_calls>"};
constexpr std::array<std::string_view, 2> kInvokeOpeners = {"<｜DSML｜ invoke", "<｜DSML｜invoke"};
constexpr std::array<std::string_view, 2> kInvokeClosers = {"</｜DSML｜ invoke>",
                                                            "</｜DSML｜invoke>"};
constexpr std::array<std::string_view, 2> kParamOpeners = {"<｜DSML｜ parameter",
                                                           "<｜DSML｜parameter"};
constexpr std::array<std::string_view, 2> kParamClosers = {"</｜DSML｜ parameter>",
                                                           "</｜DSML｜parameter>"};

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t Overlap(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// Bytes of `s` that can be emitted without ending inside a UTF-8 character.
size_t Utf8Cut(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? s.size() - back : s.size();
  }
  return s.size();
}

void EmitText(StreamDelta::Kind kind, std::string_view text, std::vector<StreamDelta>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind) {
    out.back().text += text;
    return;
  }
  StreamDelta d;
  d.kind = kind;
  d.text = std::string(text);
  out.push_back(std::move(d));
}

// Incremental reader over the start of a buffer: each step matches, needs more text, or fails.
enum class Match { kYes, kMore, kNo };

struct Reader {
  std::string_view s;
  bool final;
  size_t pos = 0;

  Match Lit(std::string_view lit) {
    std::string_view rest = s.substr(pos);
    if (rest.size() >= lit.size()) {
      if (!rest.starts_with(lit)) return Match::kNo;
      pos += lit.size();
      return Match::kYes;
    }
    return lit.starts_with(rest) && !final ? Match::kMore : Match::kNo;
  }
  template <size_t N>
  Match Any(const std::array<std::string_view, N>& lits) {
    bool more = false;
    for (std::string_view lit : lits) {
      Match m = Lit(lit);
      if (m == Match::kYes) return m;
      more |= m == Match::kMore;
    }
    return more ? Match::kMore : Match::kNo;
  }
  // Skips `chars`; kMore if the text ends while skipping (more may follow).
  Match Skip(std::string_view chars) {
    while (pos < s.size() && chars.find(s[pos]) != std::string_view::npos) ++pos;
    return pos < s.size() ? Match::kYes : final ? Match::kNo : Match::kMore;
  }
  // `key="value"`, after optional spaces.
  Match Attr(std::string_view key, std::string* value) {
    if (Match m = Skip(" "); m != Match::kYes) return m;
    if (Match m = Lit(key); m != Match::kYes) return m;
    if (Match m = Lit("=\""); m != Match::kYes) return m;
    const size_t end = s.find('"', pos);
    if (end == std::string_view::npos) return final ? Match::kNo : Match::kMore;
    *value = std::string(s.substr(pos, end - pos));
    pos = end + 1;
    return Match::kYes;
  }
};

// One parameter value as the released parser reads it.
ojson ParamValue(const std::string& value, const std::string& is_string, bool has_flag) {
  if (has_flag && is_string == "true") return value;
  ojson parsed = ojson::parse(value, nullptr, false);
  return parsed.is_discarded() ? ojson(value) : parsed;
}

}  // namespace

// Parses the invoke at the start of `s`, resuming from `progress_` (what earlier calls with a
// prefix of `s` accepted), so a long streamed value is scanned once, not once per chunk.
// kYes: *call and *consumed set.
int StreamParser::ParseInvoke(std::string_view s, bool final, ToolCall* call, size_t* consumed) {
  InvokeProgress& p = progress_;
  Reader r{s, final, p.pos};
  if (!p.header) {
    if (Match m = r.Any(kInvokeOpeners); m != Match::kYes) return static_cast<int>(m);
    if (Match m = r.Attr("name", &p.name); m != Match::kYes) return static_cast<int>(m);
    if (Match m = r.Skip(" "); m != Match::kYes) return static_cast<int>(m);
    if (Match m = r.Lit(">"); m != Match::kYes) return static_cast<int>(m);
    p.header = true;
    p.pos = r.pos;
  }
  while (true) {
    const size_t param_start = r.pos;
    if (Match m = r.Skip(" \n\r\t"); m != Match::kYes) return static_cast<int>(m);
    Match closer = r.Any(kInvokeClosers);
    if (closer == Match::kYes) break;
    Match opener = r.Any(kParamOpeners);
    if (opener != Match::kYes) {
      return static_cast<int>(closer == Match::kMore || opener == Match::kMore ? Match::kMore
                                                                             : Match::kNo);
    }
    std::string key, is_string;
    if (Match m = r.Attr("name", &key); m != Match::kYes) return static_cast<int>(m);
    const size_t before_flag = r.pos;
    Match flag = r.Attr("string", &is_string);
    if (flag == Match::kMore) return static_cast<int>(flag);
    const bool has_flag = flag == Match::kYes;
    if (!has_flag) r.pos = before_flag;
    if (Match m = r.Skip(" "); m != Match::kYes) return static_cast<int>(m);
    if (Match m = r.Lit(">"); m != Match::kYes) return static_cast<int>(m);
    // The value runs to the first parameter closer; the end-of-sentence token before it means
    // the call was cut off. Resume the search where the last one gave up (minus a tag's length,
    // as a tag may have been cut).
    const size_t value_start = r.pos;
    size_t from = value_start;
    if (p.scan_param == param_start && p.scan > from) from = p.scan;
    std::string_view rest = s.substr(from);
    size_t end = std::string_view::npos, close_len = 0;
    for (std::string_view c : kParamClosers) {
      const size_t at = rest.find(c);
      if (at < end) end = at, close_len = c.size();
    }
    const size_t eos = rest.find(kEos);
    if (eos != std::string_view::npos && eos < end) return static_cast<int>(Match::kNo);
    if (end == std::string_view::npos) {
      if (final) return static_cast<int>(Match::kNo);
      p.pos = param_start;
      p.scan_param = param_start;
      const size_t tag = kEos.size() + kParamClosers[0].size();  // longer than any tag searched
      p.scan = std::max(value_start, s.size() - std::min(s.size(), tag));
      return static_cast<int>(Match::kMore);
    }
    end += from - value_start;
    p.args[key] = ParamValue(std::string(s.substr(value_start, end)), is_string, has_flag);
    r.pos = value_start + end + close_len;
    p.pos = r.pos;
  }
  call->name = p.name;
  call->arguments = PyJsonDumps(p.args);
  *consumed = r.pos;
  return static_cast<int>(Match::kYes);
}


StreamParser::StreamParser(bool thinking, ToolCallIds call_ids)
    : state_(thinking ? State::kReasoning : State::kContent), call_ids_(std::move(call_ids)) {}

void StreamParser::Consume(size_t n) {
  buf_.erase(0, n);
  base_ += n;
}

void StreamParser::Stop(size_t eos_at) {
  raw_.resize(base_ + eos_at);
  buf_.clear();
  state_ = State::kDone;
  stopped_ = true;
  done_ = true;
}

bool StreamParser::RunText(bool final, std::vector<StreamDelta>& out) {
  const auto kind =
      state_ == State::kReasoning ? StreamDelta::Kind::kReasoning : StreamDelta::Kind::kContent;
  // The earliest tag: end of sentence, a calls opener, and "</think>" while reasoning.
  std::vector<std::string_view> tags = {kEos, kCallsOpeners[0], kCallsOpeners[1]};
  if (state_ == State::kReasoning) tags.push_back(kThinkEnd);
  size_t at = std::string::npos;
  std::string_view tag;
  for (std::string_view t : tags) {
    const size_t p = buf_.find(t);
    if (p < at) at = p, tag = t;
  }
  if (at != std::string::npos) {
    std::string_view text(buf_.data(), at);
    if (tag == kEos) {
      EmitText(kind, text, out);
      Stop(at);
      return false;
    }
    if (tag == kThinkEnd) {
      EmitText(kind, text, out);
      Consume(at + tag.size());
      state_ = State::kContent;
      return true;
    }
    // A calls block: the "\n\n" the encoder puts before it belongs to neither side.
    size_t newlines = 0;
    while (newlines < 2 && newlines < text.size() && text[text.size() - 1 - newlines] == '\n') {
      ++newlines;
    }
    EmitText(kind, text.substr(0, text.size() - newlines), out);
    opener_ = std::string(text.substr(text.size() - newlines)) + std::string(tag);
    Consume(at + tag.size());
    state_ = State::kCalls;
    return true;
  }
  size_t emit = buf_.size();
  if (!final) {
    size_t hold = 0;
    for (std::string_view t : tags) hold = std::max(hold, Overlap(buf_, t));
    // Up to two newlines before a possible tag may be the separator before a calls block.
    for (int k = 0; k < 2 && hold < buf_.size() && buf_[buf_.size() - 1 - hold] == '\n'; ++k) {
      ++hold;
    }
    emit = Utf8Cut(std::string_view(buf_).substr(0, buf_.size() - hold));
  }
  EmitText(kind, std::string_view(buf_).substr(0, emit), out);
  Consume(emit);
  if (final) state_ = State::kDone;
  return false;
}

bool StreamParser::RunCalls(bool final, std::vector<StreamDelta>& out) {
  size_t ws = 0;
  while (ws < buf_.size() && std::string_view(" \n\r\t").find(buf_[ws]) != std::string_view::npos) {
    ++ws;
  }
  std::string_view rest = std::string_view(buf_).substr(ws);
  auto malformed = [&] {
    // What could not be read as calls is content, with the block's opener if no call of the
    // block was accepted.
    EmitText(StreamDelta::Kind::kContent, opener_, out);
    opener_.clear();
    state_ = State::kContent;
    return true;
  };
  if (rest.empty()) {
    if (!final) return false;
    Consume(ws);  // an unclosed block's trailing whitespace is not content
    return malformed();
  }
  if (rest.starts_with(kEos)) {
    Stop(ws);
    return false;
  }
  for (std::string_view closer : kCallsClosers) {
    if (rest.starts_with(closer)) {
      Consume(ws + closer.size());
      opener_.clear();
      state_ = State::kContent;  // text after the block is content
      return true;
    }
    if (!final && closer.starts_with(rest)) return false;
  }
  if (!final && kEos.starts_with(rest)) return false;
  ToolCall call;
  size_t consumed = 0;
  switch (static_cast<Match>(ParseInvoke(rest, final, &call, &consumed))) {
    case Match::kMore: return false;
    case Match::kNo: progress_ = {}; return malformed();
    case Match::kYes: break;
  }
  progress_ = {};
  Consume(ws + consumed);
  opener_.clear();
  call.id = call_ids_.prefix + std::to_string(call_ids_.next++);
  StreamDelta start;
  start.kind = StreamDelta::Kind::kToolCallStart;
  start.index = calls_;
  start.id = call.id;
  start.name = call.name;
  out.push_back(std::move(start));
  StreamDelta args;
  args.kind = StreamDelta::Kind::kToolCallArguments;
  args.index = calls_;
  args.text = call.arguments;
  out.push_back(std::move(args));
  ++calls_;
  return true;
}

void StreamParser::Run(bool final, std::vector<StreamDelta>& out) {
  bool more = true;
  while (more) {
    switch (state_) {
      case State::kReasoning:
      case State::kContent: more = RunText(final, out); break;
      case State::kCalls: more = RunCalls(final, out); break;
      case State::kDone: more = false; break;
    }
  }
}

std::vector<StreamDelta> StreamParser::Push(std::string_view text) {
  std::vector<StreamDelta> out;
  if (done_) return out;
  raw_ += text;
  buf_ += text;
  Run(false, out);
  return out;
}

std::vector<StreamDelta> StreamParser::Finish() {
  std::vector<StreamDelta> out;
  if (done_) return out;
  Run(true, out);
  done_ = true;
  return out;
}

AssistantOutput ParseOutput(std::string_view text, bool thinking, ToolCallIds call_ids) {
  StreamParser parser(thinking, std::move(call_ids));
  AssistantOutput output;
  for (const StreamDelta& d : parser.Push(text)) ApplyDelta(d, output);
  for (const StreamDelta& d : parser.Finish()) ApplyDelta(d, output);
  output.stopped = parser.stopped();
  return output;
}

}  // namespace cedar::bridge::dsml
