#include "engine/expert_cache.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "engine/checkpoint_index.h"

namespace cedar {

ExpertCache::ExpertCache(std::unique_ptr<const Checkpoint> ck, const ModelConfig& c, int64_t budget_bytes)
    : ck_(std::move(ck)), n_layers_(c.n_layers), inter_(c.moe_inter_dim), dim_(c.dim), expert_bytes_(3 * int64_t(c.moe_inter_dim) * c.dim * 4), budget_(budget_bytes) {}

ExpertCache::~ExpertCache() = default;

ExpertRef ExpertCache::Get(int layer, int e) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{layer, e};
  auto it = where_.find(key);
  if (it != where_.end()) {
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);  // now the most recent
    const std::shared_ptr<const Entry>& entry = lru_.front().second;
    return {&entry->f, entry};
  }
  ++stats_.misses;
  const auto t0 = std::chrono::steady_clock::now();
  auto entry = std::make_shared<Entry>();
  // Layers past the backbone are the DSpark stages' banks (mtp.S.*, S = layer - n_layers).
  const std::string p = (layer < n_layers_ ? "layers." + std::to_string(layer) : "mtp." + std::to_string(layer - n_layers_)) +
                        ".ffn.experts." + std::to_string(e) + ".";
  // [I, d], [d, I], [I, d]: as LoadReleased's arena copies (Checkpoint::DequantizeWeightInto).
  entry->w1.resize(size_t(inter_ * dim_));
  entry->w2.resize(size_t(inter_ * dim_));
  entry->w3.resize(size_t(inter_ * dim_));
  ck_->DequantizeWeightInto(p + "w1.weight", entry->w1.data());
  ck_->DequantizeWeightInto(p + "w2.weight", entry->w2.data());
  ck_->DequantizeWeightInto(p + "w3.weight", entry->w3.data());
  entry->f.w1 = {entry->w1.data(), inter_, dim_};
  entry->f.w2 = {entry->w2.data(), dim_, inter_};
  entry->f.w3 = {entry->w3.data(), inter_, dim_};
  stats_.dequant_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const char* w : {"w1", "w2", "w3"}) {
    stats_.stored_bytes_read += int64_t(ck_->Get(p + w + ".weight").nbytes);
    if (const TensorInfo* scale = ck_->Find(p + w + ".scale")) stats_.stored_bytes_read += int64_t(scale->nbytes);
  }
  stats_.resident_bytes += expert_bytes_;
  // Evict the least recent until the new one fits (never the new one itself).
  while (stats_.resident_bytes > budget_ && !lru_.empty()) {
    where_.erase(lru_.back().first);
    lru_.pop_back();
    stats_.resident_bytes -= expert_bytes_;
    ++stats_.evictions;
  }
  lru_.emplace_front(key, entry);
  where_[key] = lru_.begin();
  return {&entry->f, entry};
}

ExpertCache::Stats ExpertCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace cedar

namespace cedar {

ExpertRef Model::expert(int l, int e) const {
  if (expert_cache_) return expert_cache_->Get(l, e);
  return {&layers_[size_t(l)].experts[size_t(e)], nullptr};
}

}  // namespace cedar
