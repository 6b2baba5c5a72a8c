#include "server/generation_memory.h"

#include <algorithm>

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
  Entry e;
  e.prompt_hash = Hash(gen_prompt);
  e.prompt_len = gen_prompt.size();
  e.shown.role = bridge::Role::kAssistant;
  e.shown.content = shown.content;
  e.shown.tool_calls = shown.tool_calls;
  e.generated = std::move(generated);
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

const GenerationMemory::Entry* GenerationMemory::Find(const Scope& scope, std::span<const int32_t> gen_prompt,
                                                      const bridge::Message& m) const {
  const uint64_t h = Hash(gen_prompt);
  for (auto it = scope.entries.rbegin(); it != scope.entries.rend(); ++it) {
    if (it->prompt_len == gen_prompt.size() && it->prompt_hash == h && SameAsShown(it->shown, m)) return &*it;
  }
  return nullptr;
}

int GenerationMemory::Reattach(const std::string& scope, const bridge::ChatTemplate& chat_template,
                               std::vector<bridge::Message>& messages, const nlohmann::json& tools) {
  std::lock_guard<std::mutex> lk(mu_);
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end() || sit->second.entries.empty()) return 0;
  Scope& s = sit->second;
  s.last_used = ++clock_;
  int attached = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    bridge::Message& m = messages[i];
    if (m.role != bridge::Role::kAssistant || m.generated) continue;
    // Render the context only for a message some entry could match.
    const bool candidate = std::any_of(s.entries.begin(), s.entries.end(),
                                       [&](const Entry& e) { return SameAsShown(e.shown, m); });
    if (!candidate) continue;
    const bridge::TokenIds gen_prompt =
        chat_template.RenderGenerationPrompt(std::span<const bridge::Message>(messages.data(), i), tools);
    if (const Entry* e = Find(s, gen_prompt, m)) {
      m.generated = e->generated;
      attached++;
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
