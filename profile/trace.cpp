#include "profile/trace.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cedar::profile {

namespace fs = std::filesystem;
using nlohmann::json;

const char* FormatName(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAuto: return "auto";
    case TraceFormat::kClaudeCode: return "claude-code";
    case TraceFormat::kMooncake: return "mooncake";
  }
  return "?";
}

bool ParseFormat(const std::string& s, TraceFormat* out) {
  for (TraceFormat f : {TraceFormat::kAuto, TraceFormat::kClaudeCode, TraceFormat::kMooncake}) {
    if (s == FormatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

namespace {

constexpr int kClaudeCodeBlock = 64;
constexpr int kMooncakeBlock = 512;

// Everything one file's parser needs to report and collect.
struct FileContext {
  std::string name;
  uint32_t scope = 0;
  uint32_t conversation = 0;
  const LoadOptions* options = nullptr;
  Trace* trace = nullptr;

  void Issue(const std::string& where, const std::string& what) const {
    if (options->strict) throw std::runtime_error(where + ": " + what + " (--strict stops here)");
    trace->issues.push_back({where, what});
  }
  // --limit: no more requests once `limit` are loaded.
  bool Full() const { return options->limit > 0 && trace->requests.size() >= options->limit; }
  void Add(TraceRequest r) const {
    r.conversation = conversation;
    r.seq = trace->requests.size();
    r.recorded_t = r.t;
    trace->requests.push_back(std::move(r));
  }
};

// "" when `j[key]` is an integer >= min, else the problem.
std::string ReadInt(const json& j, const char* key, int64_t min, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end()) return std::string("'") + key + "' is missing";
  if (!it->is_number_integer()) return std::string("'") + key + "' is not an integer";
  const int64_t v = it->get<int64_t>();
  if (v < min) return std::string("'") + key + "' is " + std::to_string(v) + ", expected >= " + std::to_string(min);
  *out = v;
  return "";
}

std::string ReadTime(const json& j, const char* key, double scale, double* out) {
  auto it = j.find(key);
  if (it == j.end()) return std::string("'") + key + "' is missing";
  if (!it->is_number()) return std::string("'") + key + "' is not a number";
  const double v = it->get<double>() * scale;
  if (!(v >= 0)) return std::string("'") + key + "' is negative";
  *out = v;
  return "";
}

std::string ReadIds(const json& j, std::vector<int64_t>* out) {
  auto it = j.find("hash_ids");
  if (it == j.end()) return "'hash_ids' is missing";
  if (!it->is_array()) return "'hash_ids' is not an array";
  out->clear();
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return "'hash_ids'[" + std::to_string(i) + "] is not a non-negative integer";
    }
    out->push_back(v.get<int64_t>());
  }
  return "";
}

// Fills the length fields of `r` and checks them against its blocks; "" when consistent.
std::string ReadRequestBody(const json& j, const char* in_key, const char* out_key, TraceRequest* r) {
  std::string e = ReadInt(j, in_key, 1, &r->input_tokens);
  if (e.empty()) e = ReadInt(j, out_key, 0, &r->output_tokens);
  if (e.empty()) e = ReadIds(j, &r->block_ids);
  if (e.empty() && !r->block_ids.empty() &&
      r->input_tokens <= int64_t(r->block_ids.size() - 1) * r->block_size) {
    e = "prompt of " + std::to_string(r->input_tokens) + " tokens is shorter than its " +
        std::to_string(r->block_ids.size()) + " blocks of " + std::to_string(r->block_size) + " imply";
  }
  return e;
}

int LineOfByte(std::string_view text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + int(std::count(text.begin(), text.begin() + ptrdiff_t(byte), '\n'));
}

void ParseClaudeCodeRequests(const json& list, double base_t, const std::string& session, const std::string& path,
                             int block_size, uint32_t scope, const FileContext& ctx) {
  for (size_t i = 0; i < list.size() && !ctx.Full(); ++i) {
    const json& e = list[i];
    const std::string here = path + "[" + std::to_string(i) + "]";
    const std::string where = ctx.name + ": " + here;
    if (!e.is_object()) {
      ctx.Issue(where, "entry is not an object");
      continue;
    }
    double t = 0;
    if (std::string err = ReadTime(e, "t", 1.0, &t); !err.empty()) {
      ctx.Issue(where, err);
      continue;
    }
    auto type = e.find("type");
    if (type != e.end() && type->is_string() && type->get<std::string>() == "subagent") {
      auto sub = e.find("requests");
      if (sub == e.end() || !sub->is_array()) {
        ctx.Issue(where, "sub-agent entry has no 'requests' array");
        continue;
      }
      auto agent = e.find("agent_id");
      const std::string id = agent != e.end() && agent->is_string() ? agent->get<std::string>() : "agent" + std::to_string(i);
      ParseClaudeCodeRequests(*sub, base_t + t, session + "/" + id, here + ".requests", block_size, scope, ctx);
      continue;
    }
    TraceRequest r;
    r.t = base_t + t;
    r.session = session;
    r.subagent = session.find('/') != std::string::npos;
    r.source = where;
    r.scope = scope;
    r.block_size = block_size;
    if (std::string err = ReadRequestBody(e, "in", "out", &r); !err.empty()) {
      ctx.Issue(where, err);
      continue;
    }
    ctx.Add(std::move(r));
  }
}

void ParseClaudeCode(std::string_view text, const FileContext& ctx) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    ctx.Issue(ctx.name + ":" + std::to_string(LineOfByte(text, e.byte)), "not valid JSON; file skipped");
    return;
  }
  if (!doc.is_object() || !doc.contains("requests") || !doc["requests"].is_array()) {
    ctx.Issue(ctx.name, "not a claude-code trace (no 'requests' array); file skipped");
    return;
  }
  int64_t block = kClaudeCodeBlock;
  if (doc.contains("block_size")) {
    if (std::string err = ReadInt(doc, "block_size", 1, &block); !err.empty()) {
      ctx.Issue(ctx.name, err + "; file skipped");
      return;
    }
  }
  const bool global = doc.contains("hash_id_scope") && doc["hash_id_scope"] == "global";
  std::string session = fs::path(ctx.name).stem().string();
  if (doc.contains("id") && doc["id"].is_string()) session = doc["id"].get<std::string>();
  ParseClaudeCodeRequests(doc["requests"], 0.0, session, "requests", int(block), global ? 0 : ctx.scope, ctx);
}

void ParseMooncake(std::string_view text, const FileContext& ctx) {
  const std::string session = fs::path(ctx.name).stem().string();
  size_t pos = 0;
  for (int line = 1; pos < text.size() && !ctx.Full(); ++line) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = ctx.name + ":" + std::to_string(line);
    const json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      ctx.Issue(where, j.is_discarded() ? "not valid JSON" : "not a JSON object");
      continue;
    }
    TraceRequest r;
    r.session = session;
    r.source = where;
    r.scope = ctx.scope;  // ids are global within the file; two files must not hit each other
    r.block_size = kMooncakeBlock;
    std::string err = ReadTime(j, "timestamp", 1e-3, &r.t);
    if (err.empty()) err = ReadRequestBody(j, "input_length", "output_length", &r);
    if (!err.empty()) {
      ctx.Issue(where, err);
      continue;
    }
    ctx.Add(std::move(r));
  }
}

TraceFormat Detect(std::string_view text, const std::string& name) {
  if (name.size() >= 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0) return TraceFormat::kMooncake;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return TraceFormat::kClaudeCode;
  size_t end = text.find('\n', start);
  if (end == std::string_view::npos) end = text.size();
  const json first = json::parse(text.substr(start, end - start), nullptr, false);
  if (!first.is_discarded() && first.is_object() && first.contains("input_length")) return TraceFormat::kMooncake;
  return TraceFormat::kClaudeCode;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read trace file " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> ExpandPath(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return {p};
  if (!fs::is_directory(p, ec)) throw std::runtime_error("trace path " + path + " does not exist");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(p)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".json" || ext == ".jsonl")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TraceFormat ParseTraceText(std::string_view text, const std::string& name, uint32_t scope, const LoadOptions& options,
                           Trace* trace) {
  const TraceFormat f = options.format == TraceFormat::kAuto ? Detect(text, name) : options.format;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return f;  // empty: no requests
  const FileContext ctx{name, scope, scope, &options, trace};
  const size_t before = trace->requests.size();
  if (f == TraceFormat::kMooncake) ParseMooncake(text, ctx);
  else ParseClaudeCode(text, ctx);
  // Recorded time: each file starts at its own first timestamp (an arrival model then places it).
  double first = 0;
  for (size_t i = before; i < trace->requests.size(); ++i) {
    first = i == before ? trace->requests[i].t : std::min(first, trace->requests[i].t);
  }
  for (size_t i = before; i < trace->requests.size(); ++i) {
    trace->requests[i].t -= first;
    trace->requests[i].recorded_t = trace->requests[i].t;
  }
  return f;
}

void SortByArrival(Trace* trace) {
  std::stable_sort(trace->requests.begin(), trace->requests.end(), [](const TraceRequest& a, const TraceRequest& b) {
    return a.t != b.t ? a.t < b.t : a.seq < b.seq;
  });
}

Trace LoadTraces(const std::vector<std::string>& paths, const LoadOptions& options) {
  Trace trace;
  uint32_t next_scope = 1;
  const auto full = [&] { return options.limit > 0 && trace.requests.size() >= options.limit; };
  for (const std::string& path : paths) {
    if (full()) break;
    for (const fs::path& file : ExpandPath(path)) {
      if (full()) break;
      const std::string text = ReadFile(file);
      const TraceFormat f = ParseTraceText(text, file.string(), next_scope++, options, &trace);
      trace.files.push_back(file.string());
      trace.formats.push_back(FormatName(f));
    }
  }
  SortByArrival(&trace);
  return trace;
}

}  // namespace cedar::profile
