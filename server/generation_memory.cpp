#include "server/generation_memory.h"
#include "server/running_hash.h"

#include <algorithm>
#include <map>

#include <xxhash.h>

namespace cedar::server {

uint64_t GenerationMemory::Hash(std::span<const int32_t> ids) { return XXH3_64bits(ids.data(), ids.size_bytes()); }

namespace {
bool SameAsShown(const bridge::Message& a, const bridge::Message& b) {
  return a.content == b.content && a.tool_calls == b.tool_calls;
}

}  // namespace

void GenerationMemory::Remember(const std::string& scope, std::span<const int32_t> gen_prompt,
                                const bridge::Message& shown, std::vector<int32_t> generated) {
  auto e = std::make_shared<Entry>();
  e->prompt_hash = Hash(gen_prompt);
  e->prompt_len = gen_prompt.size();
  e->shown.role = bridge::Role::kAssistant;
  e->shown.content = shown.content;
  e->shown.tool_calls = shown.tool_calls;
  e->generated = std::move(generated);
  std::lock_guard<std::mutex> lk(mu_);
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

int GenerationMemory::Reattach(const std::string& scope, const bridge::ChatTemplate& chat_template,
                               std::vector<bridge::Message>& messages, const nlohmann::json& tools) {
  const bool any_assistant = std::any_of(messages.begin(), messages.end(), [](const bridge::Message& m) {
    return m.role == bridge::Role::kAssistant && !m.generated;
  });
  if (!any_assistant) return 0;
  // The scope's entries, newest first within each prompt length; the lock covers only this copy.
  std::map<size_t, std::vector<std::shared_ptr<const Entry>>> by_len;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto sit = scopes_.find(scope);
    if (sit == scopes_.end() || sit->second.entries.empty()) return 0;
    sit->second.last_used = ++clock_;
    for (auto it = sit->second.entries.rbegin(); it != sit->second.entries.rend(); ++it) {
      by_len[(*it)->prompt_len].push_back(*it);
    }
  }
  // One incremental rendering: `ids` is always Render(messages[0..i)), so messages[i]'s
  // generation prompt is ids + <|assistant|>, hashed from the running state in O(1).
  chat_template.Validate(messages, tools);
  const int32_t assistant = chat_template.tokens().assistant;
  bridge::TokenIds ids = chat_template.RenderStart(tools);
  RunningHash hash;
  hash.Add(ids.data(), ids.size() * sizeof(int32_t));
  int attached = 0;
  for (bridge::Message& m : messages) {
    if (m.role == bridge::Role::kAssistant && !m.generated) {
      if (auto found = by_len.find(ids.size() + 1); found != by_len.end()) {
        const uint64_t h = hash.DigestWith(&assistant, sizeof assistant);
        for (const std::shared_ptr<const Entry>& e : found->second) {
          if (e->prompt_hash == h && SameAsShown(e->shown, m)) {
            m.generated = e->generated;
            attached++;
            break;
          }
        }
      }
    }
    const size_t before = ids.size();
    chat_template.RenderAppend(m, ids);  // with the ids just attached, as the final rendering will
    {
      const std::span<const int32_t> added = std::span<const int32_t>(ids).subspan(before);
      hash.Add(added.data(), added.size_bytes());
    }
  }
  return attached;
}

void GenerationMemory::Forget(const std::string& scope) {
  std::lock_guard<std::mutex> lk(mu_);
  scopes_.erase(scope);
}

size_t GenerationMemory::entries() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const auto& [k, s] : scopes_) n += s.entries.size();
  return n;
}

}  // namespace cedar::server
