// A reduced V4.1 config (every role present: SWA-only, ratio-2 and ratio-1 sources, a Reindex layer,
// Engram, one DSpark block) written as a sharded checkpoint in the released layout, then checked
// against the tensor inventory; defects are named tensor by tensor.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint_index.h"
#include "engine/pcg64.h"
#include "engine/safetensors.h"
#include "engine/v41_checkpoint.h"
#include "engine/v41_config.h"
#include "engine/v41_info.h"

using namespace cedar;
namespace fs = std::filesystem;

namespace {

nlohmann::json TinyConfig() {
  std::ifstream f(std::string(CEDAR_SOURCE_DIR) + "/tests/data/v41/config.json");
  nlohmann::json j;
  f >> j;
  nlohmann::json& t = j["text_config"];
  t["vocab_size"] = 300;
  t["hidden_size"] = 64;
  t["moe_intermediate_size"] = 64;
  t["num_hidden_layers"] = 4;
  t["num_attention_heads"] = 2;
  t["head_dim"] = 64;
  t["qk_rope_head_dim"] = 16;
  t["q_lora_rank"] = 32;
  t["o_lora_rank"] = 16;
  t["o_groups"] = 2;
  t["sliding_window"] = 8;
  t["compress_ratios"] = {0, 2, 1, 1, 0};
  t["kv_source_layer_ids"] = {1, 2};
  t["index_source_layer_ids"] = {1, 2, 3};
  t["candidate_source_layer_id"] = 2;
  t["index_n_heads"] = 2;
  t["index_head_dim"] = 32;
  t["index_topk"] = 4;
  t["n_routed_experts"] = 4;
  t["num_experts_per_tok"] = 2;
  t["engram_layer_ids"] = {1};
  t["engram_max_ngram_size"] = 3;
  t["engram_vocab_size"] = 100;
  t["engram_n_heads"] = 2;
  t["engram_head_dim"] = 32;
  t["engram_compressed_vocab_size"] = 50;
  t["num_nextn_predict_layers"] = 1;
  t["dspark_target_layer_ids"] = {2, 3};
  t["dspark_markov_rank"] = 8;
  t["dspark_n_routed_experts"] = 4;
  t["dspark_num_experts_per_tok"] = 2;
  // Table height = the primes drawn for (order 2..3) x 2 heads above 99: 101 + 103 + 107 + 109.
  const EngramHashConstants k = ComputeEngramHashConstants({1}, 3, 2, 100, 50);
  t["engram_num_embeddings"] = {k.table_rows[0]};
  return j;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("cedar_v41_ck_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Writes every inventory tensor (zero bytes) into two shards + the index, as the release lays it out.
void WriteCheckpoint(const V41Config& c, const fs::path& dir, const std::string& skip, const std::string& extra) {
  SafetensorsWriter a, b;
  nlohmann::json index;
  uint64_t total = 0;
  int n = 0;
  for (const V41TensorSpec& t : V41Tensors(c)) {
    for (int64_t e = 0; e < t.count; ++e) {
      const size_t brace = t.name.find("{E}");
      const std::string name = brace == std::string::npos ? t.name : t.name.substr(0, brace) + std::to_string(e) + t.name.substr(brace + 3);
      if (name == skip) continue;
      const std::vector<uint8_t> zeros(size_t(t.Bytes()), 0);
      const bool second = (n++ % 2) == 1;
      const std::string shard = second ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
      (second ? b : a).AddRaw(name, t.dtype, t.shape, zeros.data(), zeros.size());
      index["weight_map"][name] = shard;
      total += zeros.size();
    }
  }
  if (!extra.empty()) {
    const uint8_t z[4] = {0, 0, 0, 0};
    a.AddRaw(extra, DType::F32, {1}, z, 4);
    index["weight_map"][extra] = "model-00001-of-00002.safetensors";
    total += 4;
  }
  const uint8_t v[2] = {0, 0};
  a.AddRaw("vision.blocks.0.norm.weight", DType::BF16, {1}, v, 2);  // out of scope, tolerated
  index["weight_map"]["vision.blocks.0.norm.weight"] = "model-00001-of-00002.safetensors";
  total += 2;
  index["metadata"]["total_size"] = total;
  a.Write((dir / "model-00001-of-00002.safetensors").string());
  b.Write((dir / "model-00002-of-00002.safetensors").string());
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
}

}  // namespace

TEST_CASE("a reduced config in the released layout checks clean; defects are named") {
  const V41Config c = ParseV41Config(TinyConfig(), "tiny");
  CHECK(c.engram_num_embeddings[0] == 101 + 103 + 107 + 109);
  const V41Info info = ComputeV41Info(c);
  CHECK(info.families.count("engram_tables") == 1);
  CHECK(info.families.count("dspark") == 1);
  TempDir d;
  WriteCheckpoint(c, d.path, "", "");
  {
    Checkpoint ck(d.path.string());
    CHECK(CheckV41Checkpoint(c, ck).empty());
    // The index's total agrees with the bytes the inventory predicts (+2 vision bytes).
    int64_t bytes = 0;
    for (const auto& [dt, b] : info.bytes_by_dtype) bytes += b;
    CHECK(ck.VerifyAll() == uint64_t(bytes + 2));
    // A released FP8 weight dequantises through its 32x32 scales (zeros here).
    CHECK(ck.DequantizeWeight("layers.0.attn.wq_b.weight").size() == size_t(2 * 64 * 32));
    CHECK(ck.DequantizeWeight("layers.3.ffn.experts.1.w2.weight").size() == size_t(64 * 64));
  }
  fs::remove_all(d.path);
  fs::create_directories(d.path);
  WriteCheckpoint(c, d.path, "layers.2.attn.compressor.norm.weight", "layers.0.ffn.tid2eid");
  Checkpoint ck(d.path.string());
  const std::vector<std::string> p = CheckV41Checkpoint(c, ck);
  REQUIRE(p.size() == 2);
  CHECK(p[0] == "layers.2.attn.compressor.norm.weight: expected BF16 [64], found no such tensor");
  CHECK(p[1].find("layers.0.ffn.tid2eid: expected no such tensor") == 0);
  // The real config against this directory: every shape differs; the list is capped.
  const V41Config real = LoadV41ConfigFile(std::string(CEDAR_SOURCE_DIR) + "/tests/data/v41/config.json");
  CHECK(CheckV41Checkpoint(real, ck, 10).size() == 10);
}
