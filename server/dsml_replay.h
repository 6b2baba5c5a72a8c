// Prompts for models in the released DeepSeek-V4.1 chat format ("chat_format": "deepseek_v41",
// docs/chat-encoding.md), with byte-exact replay of the model's own earlier turns.
//
// Rendering: dsml::RenderSegments turns the messages into text segments; template segments are
// tokenized with the BPE tokenizer's EncodeWithSpecials (special-token strings become special
// ids, in user content too, as the released encoder, vLLM and SGLang do: see docs/SERVER.md).
// Every segment boundary sits at a special token ("<｜Assistant｜></think>" before a turn,
// "<｜end▁of▁sentence｜>" after it), so tokenizing segment by segment gives the same ids as
// tokenizing the whole text.
//
// Exact replay: when a turn finishes, DsmlMemory keeps (per scope: a session id, or "") the
// text of its generation prompt (XXH3 hash and length), the message the client was shown
// (content, tool calls with the ids we assigned, reasoning), the raw text the model generated
// and the ids it sampled (without the end-of-sentence id). A random BPE sample is often not the
// canonical tokenization of its own text, so re-encoding the text would not reproduce the ids;
// the ids themselves are spliced in. An assistant message the client sends back matches an
// entry when
//   - its tool calls carry the entry's call ids and names, with arguments equal as JSON values
//     (a client that re-serialises arguments still matches), or it has no calls and the entry
//     has none; and its content equals the shown content; and its reasoning_content, when sent,
//     equals the shown reasoning (when not sent, the remembered one is replayed);
//   - and the text rendered before it equals the entry's generation prompt (same context).
// Anything else (an edited or scripted message, another context) is rendered canonically; the
// counts of both go to /metrics (cedar_replay_exact_total, cedar_replay_canonical_total).
//
// Thread contract: DsmlMemory locks briefly in each method; DsmlPrompter is immutable apart
// from its memory and may be used from any thread.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools_bridge/lib/chat_template.h"
#include "tools_bridge/lib/dsml_encoding.h"
#include "tools_bridge/lib/tokenizer.h"

namespace cedar::server {

class DsmlMemory {
 public:
  struct Entry {
    uint64_t prompt_hash = 0;     // XXH3 of the generation prompt's text
    size_t prompt_bytes = 0;      // its length in bytes
    bridge::Message shown;        // content, tool_calls (our ids), reasoning as sent to the client
    std::string raw;              // the generated text (ids decoded, specials by name), no EOS
    std::vector<int32_t> ids;     // the sampled ids of `raw`, no EOS
  };
  // Keeps the newest `per_scope` entries of each scope and at most `max_scopes` scopes (the
  // least recently used is dropped first).
  explicit DsmlMemory(size_t per_scope = 256, size_t max_scopes = 4096)
      : per_scope_(per_scope), max_scopes_(max_scopes) {}

  // Persists the memory in `path` (a JSON-lines file, mode 0600, created if missing) so it
  // survives a restart: loads what the file holds now, then appends each new entry. When the
  // file grows past `max_bytes` it is rewritten from what the memory holds (the bounds above).
  // A line that does not parse (a write cut by a crash) is skipped. Throws std::runtime_error
  // naming the file when it cannot be opened.
  void Persist(const std::string& path, size_t max_bytes = size_t(64) << 20);

  void Remember(const std::string& scope, Entry entry);
  // The scope's entries, newest first (immutable once stored).
  std::vector<std::shared_ptr<const Entry>> Entries(const std::string& scope);
  ~DsmlMemory();
  void Forget(const std::string& scope);
  size_t entries() const;

 private:
  struct Scope {
    std::deque<std::shared_ptr<const Entry>> entries;  // oldest first
    uint64_t last_used = 0;
  };
  void Insert(const std::string& scope, std::shared_ptr<const Entry> e);  // REQUIRES: mu_ held
  void Compact();                                                          // REQUIRES: mu_ held

  size_t per_scope_, max_scopes_;
  std::string path_;      // "" = RAM only
  size_t max_bytes_ = 0;
  size_t file_bytes_ = 0; // the file's size as written
  int fd_ = -1;           // path_ opened for appending
  mutable std::mutex mu_;
  std::unordered_map<std::string, Scope> scopes_;
  uint64_t clock_ = 0;
};

// One rendered deepseek_v41 prompt.
struct DsmlPrompt {
  std::vector<int32_t> ids;
  uint64_t text_hash = 0;   // XXH3 of the whole prompt text (the generation prompt's key)
  size_t text_bytes = 0;
  bool thinking = false;    // the prompt ends with "<think>": the output starts with reasoning
  int exact = 0;            // assistant messages rendered as the ids the model sampled
  int canonical = 0;        // assistant messages rendered canonically
};

class DsmlPrompter {
 public:
  // REQUIRES: `tokenizer` (a BPE tokenizer with the V4.1 special tokens) outlives this.
  // Throws std::invalid_argument when it lacks "<｜end▁of▁sentence｜>".
  DsmlPrompter(const bridge::Tokenizer& tokenizer, size_t per_scope);

  // Renders `messages` (reattaching remembered generations of `scope`) and tokenizes.
  // Throws bridge::ChatTemplateError for what the encoder refuses.
  DsmlPrompt Render(const std::string& scope, std::vector<bridge::Message> messages,
                    const nlohmann::ordered_json& tools, const bridge::dsml::Options& options) const;

  // A finished turn: after `prompt` the model sampled `output` (the EOS id last when it stopped),
  // shown to the client as `shown`.
  void Remember(const std::string& scope, const DsmlPrompt& prompt, const bridge::Message& shown,
                const std::vector<int32_t>& output);

  int32_t eos_id() const { return eos_; }
  DsmlMemory& memory() { return memory_; }
  const DsmlMemory& memory() const { return memory_; }

 private:
  const bridge::Tokenizer& tokenizer_;
  int32_t eos_ = -1;
  mutable DsmlMemory memory_;
};

}  // namespace cedar::server
