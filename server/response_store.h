// What `store: true` keeps of a /v1/responses turn, so a later request that names it in
// `previous_response_id` sends only its new items: the conversation up to and including the
// response (as chat messages) and the Cedar session whose live state is that conversation's
// prompt and output. Continuing on that session extends the live state exactly: the cached
// tokens cover the whole previous context.
//
// Each entry holds only its own turn's messages and a pointer to the entry it continued, so a
// chain of N turns costs O(N) memory; an entry dropped from the index stays alive while a later
// entry of its chain does. The index keeps the newest `max_responses` ids.
//
// Thread contract: every method locks briefly; use from any thread.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace cedar::server {

class ResponseStore {
 public:
  struct Entry {
    std::shared_ptr<const Entry> parent;  // the response this one continued (null: none)
    nlohmann::ordered_json messages;      // this turn's new chat messages: its input, then the assistant's
    uint64_t tenant = 0;                  // who may continue it (api.h: request.tenant)
    std::string session_id;               // the session holding its state ("" = none)
    nlohmann::json response;              // the response object as answered (GET /v1/responses/{id})
    std::vector<std::string> item_ids;    // its output items' ids (PutItem), forgotten with it
  };

  explicit ResponseStore(size_t max_responses = 4096) : max_responses_(max_responses) {}

  void Put(const std::string& id, std::shared_ptr<const Entry> entry);
  // The entry, or null when unknown, dropped, or another tenant's (those look alike).
  std::shared_ptr<const Entry> Get(const std::string& id, uint64_t tenant) const;
  // Forgets `id` and its output items (DELETE /v1/responses/{id}); false when unknown, dropped
  // or another tenant's. A later response that continued it keeps its own chain (the entry
  // stays alive as that one's parent), as its session does.
  bool Delete(const std::string& id, uint64_t tenant);
  // The whole conversation up to and including `entry`, oldest message first.
  static nlohmann::ordered_json Conversation(const Entry& entry);
  // The output items of stored responses by their ids, for `item_reference` inputs (the AI
  // SDK sends those for items of stored responses). Bounded like the responses.
  void PutItem(const std::string& item_id, nlohmann::json item, uint64_t tenant);
  // The item, or nullopt when unknown, forgotten or another tenant's.
  std::optional<nlohmann::json> Item(const std::string& item_id, uint64_t tenant) const;
  size_t size() const;

 private:
  size_t max_responses_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> index_;
  std::deque<std::string> order_;  // ids, oldest first
  std::unordered_map<std::string, std::pair<nlohmann::json, uint64_t>> items_;  // item id -> (item, tenant)
  std::deque<std::string> item_order_;  // item ids, oldest first
};

}  // namespace cedar::server
