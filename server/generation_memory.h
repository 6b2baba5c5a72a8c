// Exact replay of the assistant's earlier turns. OpenAI clients send an assistant message back
// as content + tool_calls, not as the ids the model generated; rendering those canonically may
// differ from what the model produced (spacing, text after a call, a stop string), and then
// turn k+1's prompt would not extend turn k's prompt + output, and neither the live session
// nor the prefix cache would hit past turn k's prompt.
//
// So the server remembers, per scope (a session id, or "" for requests without one), what
// each turn generated, keyed by the generation prompt that produced it (an XXH3 hash of its
// ids and its length) together with the message the client was shown. When a request brings
// back an assistant message equal (content and tool calls) to the one remembered for the same
// preceding context, its generated ids are reattached (Message::generated) and the template
// renders them verbatim. A message the client changed, or one in a different context, is
// rendered canonically as usual, so reattaching never changes what the request means.
//
// Cost: Reattach renders the conversation once, incrementally (the template is prefix-stable),
// hashing as it goes, so it is linear in the conversation whatever the number of assistant
// messages; an entry can only match the one message whose generation prompt has its length.
// The lock is held only to copy a scope's entry pointers (entries are immutable once stored),
// never while rendering.
//
// This is the `cedar` chat format's memory (ids in, ids out). Models in the released
// deepseek_v41 format use DsmlMemory (dsml_replay.h), keyed by prompt text and tool-call ids.
//
// Thread contract: every method locks briefly; use from any thread.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/chat_template.h"

namespace cedar::server {

class GenerationMemory {
 public:
  // Keeps the newest `per_scope` turns of each scope and at most `max_scopes` scopes (the
  // least recently used scope is dropped first).
  explicit GenerationMemory(size_t per_scope = 256, size_t max_scopes = 4096)
      : per_scope_(per_scope), max_scopes_(max_scopes) {}

  // After `gen_prompt` (ending in <|assistant|>) the model generated `generated`, shown to the
  // client as `shown` (content + tool calls).
  void Remember(const std::string& scope, std::span<const int32_t> gen_prompt, const bridge::Message& shown,
                std::vector<int32_t> generated);

  // Sets `generated` on each assistant message of `messages` that matches a remembered turn in
  // the same context. Returns how many were reattached. Throws bridge::ChatTemplateError if a
  // prefix of `messages` cannot be rendered (the whole request would fail the same way).
  int Reattach(const std::string& scope, const bridge::ChatTemplate& chat_template,
               std::vector<bridge::Message>& messages, const nlohmann::json& tools);

  void Forget(const std::string& scope);
  size_t entries() const;

 private:
  struct Entry {
    uint64_t prompt_hash = 0;
    size_t prompt_len = 0;
    bridge::Message shown;
    std::vector<int32_t> generated;
  };
  struct Scope {
    std::deque<std::shared_ptr<const Entry>> entries;  // oldest first; immutable once stored
    uint64_t last_used = 0;
  };
  static uint64_t Hash(std::span<const int32_t> ids);

  size_t per_scope_, max_scopes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Scope> scopes_;
  uint64_t clock_ = 0;
};

}  // namespace cedar::server
