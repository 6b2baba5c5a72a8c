#include "server/response_store.h"

#include <algorithm>
#include <vector>

namespace cedar::server {

void ResponseStore::Put(const std::string& id, std::shared_ptr<const Entry> entry) {
  std::lock_guard<std::mutex> lk(mu_);
  if (index_.emplace(id, std::move(entry)).second) order_.push_back(id);
  while (order_.size() > max_responses_) {
    index_.erase(order_.front());
    order_.pop_front();
  }
}

std::shared_ptr<const ResponseStore::Entry> ResponseStore::Get(const std::string& id, uint64_t tenant) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end() || it->second->tenant != tenant) return nullptr;
  return it->second;
}

bool ResponseStore::Delete(const std::string& id, uint64_t tenant) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end() || it->second->tenant != tenant) return false;
  for (const std::string& item : it->second->item_ids) {
    if (items_.erase(item) > 0) item_order_.erase(std::find(item_order_.begin(), item_order_.end(), item));
  }
  index_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), id));  // O(max_responses): deletes are rare
  return true;
}

nlohmann::ordered_json ResponseStore::Conversation(const Entry& entry) {
  std::vector<const Entry*> chain;
  for (const Entry* e = &entry; e; e = e->parent.get()) chain.push_back(e);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const auto& m : (*it)->messages) out.push_back(m);
  }
  return out;
}

void ResponseStore::PutItem(const std::string& item_id, nlohmann::json item, uint64_t tenant) {
  std::lock_guard<std::mutex> lk(mu_);
  if (items_.insert_or_assign(item_id, std::make_pair(std::move(item), tenant)).second) item_order_.push_back(item_id);
  while (item_order_.size() > 4 * max_responses_) {  // a response has a few items
    items_.erase(item_order_.front());
    item_order_.pop_front();
  }
}

std::optional<nlohmann::json> ResponseStore::Item(const std::string& item_id, uint64_t tenant) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = items_.find(item_id);
  if (it == items_.end() || it->second.second != tenant) return std::nullopt;
  return it->second.first;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return index_.size();
}

}  // namespace cedar::server
