#include "engine/expert_cache.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "engine/checkpoint_index.h"
#include "engine/v41_held.h"

namespace cedar {

ExpertCache::ExpertCache(std::unique_ptr<const Checkpoint> ck, const ModelConfig& c, int64_t budget_bytes, WeightPrecision weights)
    : ck_(std::move(ck)),
      n_layers_(c.n_layers),
      inter_(c.moe_inter_dim),
      dim_(c.dim),
      expert_bytes_(3 * int64_t(c.moe_inter_dim) * c.dim * 4),
      budget_(budget_bytes),
      weights_(weights) {}

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
  // [I, d], [d, I], [I, d], held as LoadReleased holds resident experts (HoldWeight, same type).
  Entry* en = entry.get();
  auto alloc = [en](size_t bytes) -> void* {
    en->parts.emplace_back((bytes + sizeof(float) - 1) / sizeof(float));
    return en->parts.back().data();
  };
  const std::pair<Weight*, std::pair<int64_t, int64_t>> ws[] = {
      {&en->f.w1, {inter_, dim_}}, {&en->f.w2, {dim_, inter_}}, {&en->f.w3, {inter_, dim_}}};
  const char* names[] = {"w1", "w2", "w3"};
  for (int i = 0; i < 3; ++i) {
    const std::string name = p + names[i] + ".weight";
    Weight* w = ws[i].first;
    w->rows = ws[i].second.first;
    w->cols = ws[i].second.second;
    const kernels::WeightType held = HeldType(*ck_, name, w->rows, w->cols, weights_);
    HoldWeight(*ck_, name, held, w, alloc);
    en->bytes += HeldBytes(held, w->rows, w->cols);
  }
  stats_.dequant_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const char* w : {"w1", "w2", "w3"}) {
    stats_.stored_bytes_read += int64_t(ck_->Get(p + w + ".weight").nbytes);
    if (const TensorInfo* scale = ck_->Find(p + w + ".scale")) stats_.stored_bytes_read += int64_t(scale->nbytes);
  }
  stats_.resident_bytes += entry->bytes;
  // Evict the least recent until the new one fits (never the new one itself).
  while (stats_.resident_bytes > budget_ && !lru_.empty()) {
    stats_.resident_bytes -= lru_.back().second->bytes;
    where_.erase(lru_.back().first);
    lru_.pop_back();
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
