#include "server/dsml_replay.h"
#include "server/running_hash.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <xxhash.h>

namespace cedar::server {

namespace {

// Arguments equal as JSON values (key order and spacing aside); text that is not JSON compares
// as text.
bool SameArguments(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const nlohmann::json ja = nlohmann::json::parse(a, nullptr, false);
  const nlohmann::json jb = nlohmann::json::parse(b, nullptr, false);
  if (ja.is_discarded() || jb.is_discarded()) return false;
  return ja == jb;
}

bool Matches(const DsmlMemory::Entry& e, const bridge::Message& m) {
  if (m.content != e.shown.content) return false;
  if (!m.reasoning.empty() && m.reasoning != e.shown.reasoning) return false;
  if (m.tool_calls.size() != e.shown.tool_calls.size()) return false;
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    const bridge::ToolCall& a = m.tool_calls[i];
    const bridge::ToolCall& b = e.shown.tool_calls[i];
    if (a.id != b.id || a.name != b.name || !SameArguments(a.arguments, b.arguments)) return false;
  }
  return true;
}


}  // namespace

namespace {

nlohmann::json EntryJson(const std::string& scope, const DsmlMemory::Entry& e) {
  nlohmann::json calls = nlohmann::json::array();
  for (const bridge::ToolCall& c : e.shown.tool_calls) calls.push_back({c.id, c.name, c.arguments});
  return {{"scope", scope},   {"hash", e.prompt_hash},          {"bytes", e.prompt_bytes},
          {"content", e.shown.content}, {"reasoning", e.shown.reasoning}, {"calls", calls},
          {"raw", e.raw},       {"ids", e.ids}};
}

std::string EntryLine(const std::string& scope, const DsmlMemory::Entry& e) {
  return EntryJson(scope, e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

}  // namespace

DsmlMemory::~DsmlMemory() {
  if (fd_ >= 0) ::close(fd_);
}

void DsmlMemory::Persist(const std::string& path, size_t max_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  path_ = path;
  max_bytes_ = max_bytes;
  size_t loaded = 0, skipped = 0;
  if (std::ifstream in(path, std::ios::binary); in) {
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      try {
        if (j.is_discarded()) throw std::invalid_argument("not JSON");
        auto e = std::make_shared<Entry>();
        e->prompt_hash = j.at("hash").get<uint64_t>();
        e->prompt_bytes = j.at("bytes").get<size_t>();
        e->shown.role = bridge::Role::kAssistant;
        e->shown.content = j.at("content").get<std::string>();
        e->shown.reasoning = j.at("reasoning").get<std::string>();
        for (const auto& c : j.at("calls")) {
          e->shown.tool_calls.push_back({c.at(0).get<std::string>(), c.at(1).get<std::string>(), c.at(2).get<std::string>()});
        }
        e->raw = j.at("raw").get<std::string>();
        e->ids = j.at("ids").get<std::vector<int32_t>>();
        Insert(j.at("scope").get<std::string>(), std::move(e));
        loaded++;
      } catch (const std::exception&) {
        skipped++;  // a line cut by a crash, or not ours
      }
    }
  }
  spdlog::info("replay memory {}: {} turns loaded, {} lines skipped", path, loaded, skipped);
  Compact();  // rewrites the file with what is kept (bounded) and opens it for appending
}

void DsmlMemory::Compact() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("replay memory: cannot create " + tmp + ": " + std::strerror(errno));
  // The most recently used scopes first, up to half the bound (so appends may double it before
  // the next rewrite); older scopes stay in RAM only.
  std::vector<const std::pair<const std::string, Scope>*> order;
  for (const auto& kv : scopes_) order.push_back(&kv);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->second.last_used > b->second.last_used; });
  size_t bytes = 0;
  bool ok = true;
  for (const auto* kv : order) {
    std::string lines;
    for (const auto& e : kv->second.entries) lines += EntryLine(kv->first, *e);
    if (bytes + lines.size() > max_bytes_ / 2) break;
    ok = ok && WriteAll(fd, lines);
    bytes += lines.size();
  }
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    throw std::runtime_error("replay memory: cannot write " + path_ + ": " + std::strerror(errno));
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error("replay memory: cannot open " + path_ + ": " + std::strerror(errno));
  file_bytes_ = bytes;
}

void DsmlMemory::Remember(const std::string& scope, Entry entry) {
  auto e = std::make_shared<const Entry>(std::move(entry));
  std::lock_guard<std::mutex> lk(mu_);
  if (fd_ >= 0) {
    const std::string line = EntryLine(scope, *e);
    if (!WriteAll(fd_, line)) spdlog::warn("replay memory {}: write failed: {}", path_, std::strerror(errno));
    file_bytes_ += line.size();
  }
  Insert(scope, std::move(e));
  if (fd_ >= 0 && file_bytes_ > max_bytes_) {
    try {
      Compact();
    } catch (const std::exception& ex) {
      spdlog::warn("{}", ex.what());
    }
  }
}

void DsmlMemory::Insert(const std::string& scope, std::shared_ptr<const Entry> e) {
  if (!scopes_.count(scope) && scopes_.size() >= max_scopes_) {
    auto oldest = std::min_element(scopes_.begin(), scopes_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
    scopes_.erase(oldest);
  }
  Scope& s = scopes_[scope];
  s.last_used = ++clock_;
  s.entries.push_back(std::move(e));
  while (s.entries.size() > per_scope_) s.entries.pop_front();
}

std::vector<std::shared_ptr<const DsmlMemory::Entry>> DsmlMemory::Entries(const std::string& scope) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) return {};
  it->second.last_used = ++clock_;
  return {it->second.entries.rbegin(), it->second.entries.rend()};
}

void DsmlMemory::Forget(const std::string& scope) {
  std::lock_guard<std::mutex> lk(mu_);
  // A deleted session's turns leave the file too (rewritten without them).
  if (scopes_.erase(scope) && fd_ >= 0) {
    try {
      Compact();
    } catch (const std::exception& ex) {
      spdlog::warn("{}", ex.what());
    }
  }
}

size_t DsmlMemory::entries() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const auto& [k, s] : scopes_) n += s.entries.size();
  return n;
}

DsmlPrompter::DsmlPrompter(const bridge::Tokenizer& tokenizer, size_t per_scope)
    : tokenizer_(tokenizer), memory_(per_scope) {
  const auto eos = tokenizer.FindSpecial(bridge::dsml::kEos);
  if (!eos) {
    throw std::invalid_argument("chat_format deepseek_v41: the tokenizer has no \"" + std::string(bridge::dsml::kEos) +
                                "\" token (expected the released DeepSeek tokenizer.json)");
  }
  eos_ = *eos;
}

DsmlPrompt DsmlPrompter::Render(const std::string& scope, std::vector<bridge::Message> messages,
                                const nlohmann::ordered_json& tools, const bridge::dsml::Options& options) const {
  // Candidates by what the client sent back; the context is checked on the rendered text below.
  std::vector<std::shared_ptr<const DsmlMemory::Entry>> chosen(messages.size());
  const bool any_assistant = std::any_of(messages.begin(), messages.end(),
                                         [](const bridge::Message& m) { return m.role == bridge::Role::kAssistant; });
  if (any_assistant) {
    const auto entries = memory_.Entries(scope);
    for (size_t i = 0; i < messages.size() && !entries.empty(); ++i) {
      bridge::Message& m = messages[i];
      if (m.role != bridge::Role::kAssistant || m.raw) continue;
      for (const auto& e : entries) {
        if (Matches(*e, m)) {
          chosen[i] = e;
          m.raw = e->raw;
          break;
        }
      }
    }
  }
  // Render; a candidate whose preceding text is not its generation prompt is dropped and the
  // request rendered again (each round drops at least one, so this ends).
  bridge::dsml::Rendered rendered;
  for (;;) {
    rendered = bridge::dsml::RenderSegments(messages, tools, options);
    RunningHash h;
    bool dropped = false;
    for (const bridge::dsml::Segment& s : rendered.segments) {
      if (s.message >= 0 && chosen[size_t(s.message)]) {
        const DsmlMemory::Entry& e = *chosen[size_t(s.message)];
        if (s.raw_offset != 0 || s.text != e.raw || h.bytes() != e.prompt_bytes || h.Digest() != e.prompt_hash) {
          chosen[size_t(s.message)].reset();
          messages[size_t(s.message)].raw.reset();
          dropped = true;
        }
      }
      h.Add(s.text.data(), s.text.size());
    }
    if (!dropped) break;
  }
  DsmlPrompt out;
  RunningHash whole;
  for (const bridge::dsml::Segment& s : rendered.segments) {
    whole.Add(s.text.data(), s.text.size());
    if (s.message >= 0 && chosen[size_t(s.message)]) {
      const auto& ids = chosen[size_t(s.message)]->ids;
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
      out.exact++;
    } else {
      const bridge::TokenIds ids = tokenizer_.EncodeWithSpecials(s.text);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    }
  }
  for (const bridge::Message& m : messages) out.canonical += m.role == bridge::Role::kAssistant;
  out.canonical -= out.exact;
  out.text_hash = whole.Digest();
  out.text_bytes = whole.bytes();
  const std::string_view last = rendered.segments.empty() ? std::string_view() : rendered.segments.back().text;
  out.thinking = last.ends_with(bridge::dsml::kThinkStart);
  spdlog::debug("deepseek_v41 prompt: {} ids, {} bytes, {} exact replays, {} canonical assistant turns",
                out.ids.size(), out.text_bytes, out.exact, out.canonical);
  return out;
}

void DsmlPrompter::Remember(const std::string& scope, const DsmlPrompt& prompt, const bridge::Message& shown,
                            const std::vector<int32_t>& output) {
  DsmlMemory::Entry e;
  e.prompt_hash = prompt.text_hash;
  e.prompt_bytes = prompt.text_bytes;
  e.shown.role = bridge::Role::kAssistant;
  e.shown.content = shown.content;
  e.shown.tool_calls = shown.tool_calls;
  e.shown.reasoning = shown.reasoning;
  // Everything up to the first end-of-sentence id: the encoder writes that token itself after
  // the replayed text, and (as the released format says) nothing after it is part of the turn.
  const auto end = std::find(output.begin(), output.end(), eos_);
  e.ids.assign(output.begin(), end);
  e.raw = tokenizer_.Decode(e.ids, bridge::SpecialText::kName);
  memory_.Remember(scope, std::move(e));
}

}  // namespace cedar::server
