// Routed experts of a released checkpoint read on demand (issue 21, `--max-ram`): when the dense
// weights fit the budget but the experts do not, an expert is read from the memory-mapped shard the
// first time it is routed and kept in an LRU within the budget left after the dense part. It is held
// at the load's `--weights` precision (issue 20: as-stored keeps the released FP4/FP8 bytes, bf16 /
// int8 convert, f32 dequantises) through the loader's own HoldWeight (engine/v41_held.h), so its
// bytes are the ones LoadReleased would have put in the arena and the forward's results are
// bit-identical; only the time differs. The budget counts those held bytes.
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/model.h"

namespace cedar {

class Checkpoint;

class ExpertCache {
 public:
  // `budget_bytes`: bytes of experts kept resident, as held at `weights` (at least one expert).
  // Experts in use by a running FFN stay alive through their pins even when evicted, so the budget
  // can be passed by the experts of one call (at most experts_per_token x batch rows, usually a few).
  ExpertCache(std::unique_ptr<const Checkpoint> ck, const ModelConfig& c, int64_t budget_bytes,
              WeightPrecision weights = WeightPrecision::kF32);
  ~ExpertCache();
  // Expert e of layer l, read and held if absent (thread-safe; a miss holds the lock while converting).
  // l >= n_layers: expert e of DSpark stage l - n_layers (mtp.S.ffn.experts.e).
  ExpertRef Get(int layer, int e) const;
  int64_t ExpertBytes() const { return expert_bytes_; }  // F32 bytes of one expert (w1, w2, w3)
  WeightPrecision weights() const { return weights_; }    // the precision experts are held at
  struct Stats {
    int64_t hits = 0, misses = 0, evictions = 0;
    int64_t resident_bytes = 0;     // held bytes of the cached experts (their type's, 64-byte parts)
    int64_t stored_bytes_read = 0;  // bytes of the misses' tensors and scales as stored in the shards
    double dequant_seconds = 0;     // wall seconds spent reading and converting misses (cedar bench: its share of decode)
  };
  Stats stats() const;

 private:
  struct Entry {
    std::vector<std::vector<float>> parts;  // the held tensors' elements and scales (float-aligned)
    int64_t bytes = 0;                      // HeldBytes of w1 + w2 + w3: what the budget counts
    FfnWeights f;
  };
  using Key = std::pair<int, int>;
  std::unique_ptr<const Checkpoint> ck_;
  int n_layers_;  // backbone layers: keys past them name DSpark stages
  int64_t inter_, dim_, expert_bytes_, budget_;
  WeightPrecision weights_;
  mutable std::mutex mu_;
  mutable std::list<std::pair<Key, std::shared_ptr<const Entry>>> lru_;  // most recent first
  mutable std::map<Key, decltype(lru_)::iterator> where_;
  mutable Stats stats_;
};

}  // namespace cedar
