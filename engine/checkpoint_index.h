// A checkpoint directory as the released model ships it: `model.safetensors.index.json`
// ({"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}) over memory-mapped shards,
// or a single `model.safetensors`. Shards are mapped when first used (the released files are 48
// shards, ~475 GiB; nothing is read until a tensor's pages are touched).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/safetensors.h"

namespace cedar {

class Checkpoint {
 public:
  // Opens `dir` (throws std::runtime_error naming the file and what is wrong). With an index, every
  // shard it names must exist; each shard's header is checked against the index when it is mapped
  // (a tensor the index places in a shard that lacks it is an error naming both).
  explicit Checkpoint(const std::string& dir);

  bool Sharded() const { return sharded_; }
  // Every tensor name (from the index, or from the single file's header).
  std::vector<std::string> Names() const;
  size_t Size() const { return weight_map_.size(); }
  // The shard file a tensor lives in, relative to the directory; empty if unknown.
  std::string ShardOf(const std::string& name) const;
  // The tensor (mapping its shard on first use); nullptr if the checkpoint has no such tensor.
  const TensorInfo* Find(const std::string& name) const;
  // As Find, but throws naming the tensor when it is absent.
  const TensorInfo& Get(const std::string& name) const;
  // The index's metadata.total_size (0 without an index).
  uint64_t IndexTotalSize() const { return total_size_; }
  // Maps every shard and checks each against the index; returns the summed tensor bytes.
  uint64_t VerifyAll() const;

  // Dequantises a weight to float whatever its released form: F32, BF16; F8_E4M3 with a
  // `<prefix>.scale` F8_E8M0 tensor of 2-D blocks ([rows/br, cols/bc]); I8 packed FP4 with a
  // `<prefix>.scale` of one E8M0 per `fp4_block` values along a row. `<prefix>` is the name
  // without its last ".weight". Returns the logical [rows, cols] values (FP4 cols = 2 * bytes).
  std::vector<float> DequantizeWeight(const std::string& name, int fp4_block = 32) const;
  // The logical [rows, cols] DequantizeWeight returns (a 1-D tensor gives [n, 1]), checking the
  // weight's dtype and its scale tensor exactly as DequantizeWeight does; throws naming the tensor.
  std::pair<int64_t, int64_t> LogicalShape(const std::string& name, int fp4_block = 32) const;
  // DequantizeWeight into caller memory (rows * cols floats from LogicalShape), so a loader can
  // write straight into its arena without a temporary copy.
  void DequantizeWeightInto(const std::string& name, float* out, int fp4_block = 32) const;
  // Drops this process's copies of every mapped shard's pages (they stay valid and fault back in
  // from the file). The released loader calls it after each shard so resident memory holds the
  // dequantised weights, not the file.
  void ReleasePages() const;
  // The shard files (sorted, each once); a single-file checkpoint gives {"model.safetensors"}.
  std::vector<std::string> ShardFiles() const;

 private:
  const SafetensorsFile& Shard(const std::string& file) const;
  std::string dir_;
  bool sharded_ = false;
  uint64_t total_size_ = 0;
  std::map<std::string, std::string> weight_map_;  // tensor -> shard file
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;
};

}  // namespace cedar
