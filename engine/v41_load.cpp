// Loading a checkpoint in the released DeepSeek-V4.1 layout (issue 21): the released config
// mapped onto ModelConfig, tensors found through model.safetensors.index.json, FP8/FP4 weights
// dequantised with their E8M0 block scales. Names, shapes and dtypes: docs/v41-contract.md §2.
//
// Why dequantise once into the arena rather than in the matmul kernels: the CPU kernels
// (kernels/ops.h) are F32 matrix-vector/matrix-matrix products; a fused FP8/FP4 path would decode
// every weight once per token (decode) or per chunk (prefill) instead of once per process. The
// measurement is in docs/v41-contract.md §8 (load cost per stored byte vs a decode step).
#include "engine/v41_load.h"

#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "engine/checkpoint_index.h"
#include "engine/expert_cache.h"
#include "engine/model.h"
#include "engine/v41_checkpoint.h"
#include "engine/v41_held.h"
#include "kernels/hw_probe.h"
#include "kernels/ops.h"

namespace cedar {

namespace {

// Cedar field -> {key in the HF config.json (under text_config unless it starts with '/'), key in the
// flat inference/config.json}. Used to name the released key in ModelConfig::Validate's messages.
const std::map<std::string, std::pair<std::string, std::string>>& KeyMap() {
  static const std::map<std::string, std::pair<std::string, std::string>> m = {
      {"vocab_size", {"vocab_size", "vocab_size"}},
      {"dim", {"hidden_size", "dim"}},
      {"n_layers", {"num_hidden_layers", "n_layers"}},
      {"n_encoder_layers", {"num_hidden_layers", "n_layers"}},
      {"n_heads", {"num_attention_heads", "n_heads"}},
      {"head_dim", {"head_dim", "head_dim"}},
      {"rope_dim", {"qk_rope_head_dim", "rope_head_dim"}},
      {"q_lora_rank", {"q_lora_rank", "q_lora_rank"}},
      {"o_groups", {"o_groups", "o_groups"}},
      {"o_group_rank", {"o_lora_rank", "o_lora_rank"}},
      {"window", {"sliding_window", "window_size"}},
      {"compress_ratios", {"compress_ratios", "compress_ratios"}},
      {"kv_source_layers", {"kv_source_layer_ids", "kv_source_layers"}},
      {"index_source_layers", {"index_source_layer_ids", "index_source_layers"}},
      {"index_heads", {"index_n_heads", "index_n_heads"}},
      {"index_head_dim", {"index_head_dim", "index_head_dim"}},
      {"index_topk", {"index_topk", "index_topk"}},
      {"candidate_source_layer", {"candidate_source_layer_id", "candidate_source_layer"}},
      {"candidate_blocks", {"candidate_topk_blocks", "candidate_topk_blocks"}},
      {"candidate_block_size", {"candidate_block_size", "candidate_block_size"}},
      {"n_routed_experts", {"n_routed_experts", "n_routed_experts"}},
      {"n_shared_experts", {"n_shared_experts", "n_shared_experts"}},
      {"experts_per_token", {"num_experts_per_tok", "n_activated_experts"}},
      {"moe_inter_dim", {"moe_intermediate_size", "moe_inter_dim"}},
      {"route_scale", {"routed_scaling_factor", "route_scale"}},
      {"swiglu_limit", {"swiglu_limit", "swiglu_limit"}},
      {"rope_theta", {"rope_theta", "rope_theta"}},
      {"compress_rope_theta", {"compress_rope_theta", "compress_rope_theta"}},
      {"norm_eps", {"rms_norm_eps", "norm_eps"}},
      {"max_seq_len", {"max_position_embeddings", "original_seq_len * rope_factor"}},
      {"hc_mult", {"hc_mult", "hc_mult"}},
      {"hc_sinkhorn_iters", {"hc_sinkhorn_iters", "hc_sinkhorn_iters"}},
      {"hc_eps", {"hc_eps", "hc_eps"}},
      {"rope_factor", {"rope_scaling.factor", "rope_factor"}},
      {"rope_original_seq_len", {"rope_scaling.original_max_position_embeddings", "original_seq_len"}},
      {"rope_beta_fast", {"rope_scaling.beta_fast", "beta_fast"}},
      {"rope_beta_slow", {"rope_scaling.beta_slow", "beta_slow"}},
      {"score_func", {"scoring_func", "score_func"}},
      {"norm_topk_prob", {"norm_topk_prob", "norm_topk_prob"}},
      {"engram_layers", {"engram_layer_ids", "engram_layer_ids"}},
      {"engram_table_rows", {"engram_num_embeddings", "engram_num_embeddings"}},
      {"engram_max_ngram", {"engram_max_ngram_size", "engram_max_ngram_size"}},
      {"engram_n_heads", {"engram_n_heads", "engram_n_heads"}},
      {"engram_head_dim", {"engram_head_dim", "engram_head_dim"}},
      {"engram_vocab_size", {"engram_vocab_size", "engram_vocab_size"}},
      {"engram_compressed_vocab", {"engram_compressed_vocab_size", "engram_compressed_vocab_size"}},
      {"engram_pad_id", {"engram_pad_token_id", "engram_pad_id"}},
      {"n_mtp_layers", {"num_nextn_predict_layers", "n_mtp_layers"}},
  };
  return m;
}

// "kv_source_layers: expected ..." -> "text_config.kv_source_layer_ids: expected ... (Cedar's kv_source_layers)".
// The field part may be "compress_ratios[3]" or "a/b/c"; each name is translated.
std::string ReleasedKeyLine(const std::string& line, bool flat) {
  const size_t colon = line.find(": ");
  if (colon == std::string::npos) return line;
  const std::string field = line.substr(0, colon);
  std::string out;
  size_t start = 0;
  while (start <= field.size()) {
    size_t slash = field.find('/', start);
    if (slash == std::string::npos) slash = field.size();
    const std::string part = field.substr(start, slash - start);
    const size_t br = part.find('[');
    const std::string base = part.substr(0, br), rest = br == std::string::npos ? "" : part.substr(br);
    auto it = KeyMap().find(base);
    std::string key = it == KeyMap().end() ? base : (flat ? it->second.second : "text_config." + it->second.first);
    if (!out.empty()) out += "/";
    out += key + rest;
    start = slash + 1;
  }
  return out + line.substr(colon) + " (Cedar's " + field + ")";
}

// CPU seconds of the calling thread (the dequantisation runs on it): on a shared machine the wall
// time of a load measures the neighbours, this measures the work.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string MiB(int64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1 << 20));
  return buf;
}

// One weight to fill: the released tensor, where it goes, the [rows, cols] the forward expects.
struct Planned {
  std::string name;
  Weight* dst;
  int64_t rows, cols;
  bool expert;
};


}  // namespace

std::string ReleasedConfigPath(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(dir + "/config.json")) return dir + "/config.json";
  if (fs::exists(dir + "/inference/config.json")) return dir + "/inference/config.json";
  return "";
}

ModelConfig ModelConfigFromV41(const V41Config& v, const std::string& where) {
  const bool flat = v.spelling == "inference";
  const std::string p = flat ? "" : "text_config.";
  ModelConfig c;
  c.weight_layout = "deepseek_v41";
  c.chat_format = "deepseek_v41";
  c.vocab_size = v.vocab_size;
  c.dim = v.dim;
  c.n_layers = v.n_layers;
  c.n_encoder_layers = v.n_layers / 2;  // the CED cut of the released model (NOTES §3)
  c.n_heads = v.n_heads;
  c.head_dim = v.head_dim;
  c.rope_dim = v.rope_dim;
  c.q_lora_rank = v.q_lora_rank;
  c.o_groups = v.o_groups;
  c.o_group_rank = v.o_lora_rank;
  c.window = v.window;
  // The released list carries the DSpark blocks after the backbone; ModelConfig is the backbone.
  c.compress_ratios.assign(v.compress_ratios.begin(), v.compress_ratios.begin() + std::min<size_t>(v.compress_ratios.size(), size_t(v.n_layers)));
  c.kv_source_layers = v.kv_source_layers;
  c.index_source_layers = v.index_source_layers;
  c.index_heads = v.index_n_heads;
  c.index_head_dim = v.index_head_dim;
  c.index_topk = v.index_topk;
  std::ostringstream err;
  if (v.candidate_source_layer == 0)  // Cedar's 0 means "off"; a released source at layer 0 cannot be expressed
    err << p << (flat ? "candidate_source_layer" : "candidate_source_layer_id") << ": expected -1 (none) or a layer > 0, found 0\n";
  c.candidate_source_layer = v.candidate_source_layer < 0 ? 0 : v.candidate_source_layer;
  c.candidate_blocks = v.candidate_topk_blocks;
  c.candidate_block_size = v.candidate_block_size;
  c.n_routed_experts = v.n_routed_experts;
  c.n_shared_experts = v.n_shared_experts;
  c.experts_per_token = v.n_activated_experts;
  c.moe_inter_dim = v.moe_inter_dim;
  c.route_scale = float(v.route_scale);
  c.swiglu_limit = float(v.swiglu_limit);
  c.rope_theta = float(v.rope_theta);
  c.compress_rope_theta = float(v.compress_rope_theta);
  c.norm_eps = float(v.norm_eps);
  if (v.max_positions > INT_MAX)
    err << p << (flat ? "original_seq_len * rope_factor" : "max_position_embeddings") << ": expected <= " << INT_MAX << ", found " << v.max_positions << "\n";
  c.max_seq_len = int(std::min<int64_t>(v.max_positions, INT_MAX));
  c.hc_mult = v.hc_mult;
  c.hc_sinkhorn_iters = v.hc_sinkhorn_iters;
  c.hc_eps = float(v.hc_eps);
  c.rope_factor = float(v.rope_factor);
  c.rope_original_seq_len = v.original_seq_len;
  c.rope_beta_fast = float(v.beta_fast);
  c.rope_beta_slow = float(v.beta_slow);
  c.score_func = v.score_func;
  c.norm_topk_prob = v.norm_topk_prob;
  c.kv_dtype = "released";  // the released forward rounds its stored KV (docs/v41-contract.md §3)
  c.engram_layers = v.engram_layer_ids;
  c.engram_table_rows = v.engram_num_embeddings;
  c.engram_max_ngram = v.engram_max_ngram;
  c.engram_n_heads = v.engram_n_heads;
  c.engram_head_dim = v.engram_head_dim;
  c.engram_vocab_size = v.engram_vocab_size;
  c.engram_compressed_vocab = v.engram_compressed_vocab;
  c.engram_pad_id = v.engram_pad_id;
  c.n_mtp_layers = v.n_mtp_layers;
  if (v.n_routed_experts < 1) err << p << "n_routed_experts: expected >= 1 (every released layer is MoE), found " << v.n_routed_experts << "\n";
  if (v.n_shared_experts > 1)
    err << p << "n_shared_experts: expected 0 or 1 (Cedar runs one shared expert of width moe_intermediate_size), found " << v.n_shared_experts << "\n";
  std::istringstream problems(c.Validate());
  for (std::string line; std::getline(problems, line);)
    if (!line.empty()) err << ReleasedKeyLine(line, flat) << "\n";
  if (!err.str().empty()) throw std::invalid_argument(where + ": the released config does not map onto a model Cedar runs:\n" + err.str());
  return c;
}

uint64_t ReleasedFingerprint(const std::string& dir, const std::string& config_path) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add_file = [&](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("model: cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string b = ss.str();
    XXH3_64bits_update(st, b.data(), b.size());
  };
  add_file(config_path);
  add_file(dir + "/model.safetensors.index.json");
  const Checkpoint ck(dir);
  for (const std::string& shard : ck.ShardFiles()) {
    const std::string path = dir + "/" + shard;
    std::ifstream f(path, std::ios::binary);
    uint64_t len = 0;
    if (!f.read(reinterpret_cast<char*>(&len), 8)) throw std::runtime_error("model: " + path + ": cannot read the safetensors header length");
    const uint64_t size = std::filesystem::file_size(path);
    if (len > size - 8) throw std::runtime_error("model: " + path + ": header length " + std::to_string(len) + " exceeds the file (" + std::to_string(size) + " bytes)");
    std::string header(len, '\0');
    f.read(header.data(), std::streamsize(len));
    XXH3_64bits_update(st, shard.data(), shard.size());
    XXH3_64bits_update(st, &size, sizeof size);
    XXH3_64bits_update(st, &len, sizeof len);
    XXH3_64bits_update(st, header.data(), header.size());
    // The first and last 64 KiB of the data (<= 6 MiB over the released 48 shards): two checkpoints
    // with the same names and shapes but other weights (e.g. `cedar init` seeds) differ here.
    const uint64_t data = size - 8 - len, part = std::min<uint64_t>(data, 64 << 10);
    std::string ends(size_t(2 * part), '\0');
    f.read(ends.data(), std::streamsize(part));
    f.seekg(std::streamoff(size - part));
    f.read(ends.data() + part, std::streamsize(part));
    if (!f) throw std::runtime_error("model: " + path + ": cannot read its data");
    XXH3_64bits_update(st, ends.data(), ends.size());
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::unique_ptr<const Model> Model::LoadReleased(const std::string& dir, const LoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.weights == WeightPrecision::kFp8Fp4)
    throw std::invalid_argument("model: " + dir + ": --weights fp8-fp4 converts a Cedar-layout model to the released precisions; "
                                "a released-layout model holds them already: use --weights as-stored");
  const std::string config_path = ReleasedConfigPath(dir);
  if (config_path.empty()) throw std::runtime_error("model: " + dir + ": expected config.json (or inference/config.json) beside model.safetensors.index.json, found neither");
  V41Config v;
  ModelConfig c;
  try {
    v = LoadV41ConfigFile(config_path);
    c = ModelConfigFromV41(v, config_path);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("model: " + std::string(e.what()));
  }
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = c;
  auto report = std::make_unique<ReleasedLoadReport>();

  // Names, dtypes and shapes of every tensor (headers only), then the index's total.
  auto owned_ck = std::make_unique<const Checkpoint>(dir);
  const Checkpoint& ck = *owned_ck;
  const std::vector<std::string> problems = CheckV41Checkpoint(v, ck, 10);
  if (!problems.empty()) {
    std::string msg = "model: " + dir + ": the checkpoint does not match " + config_path + ":";
    for (const std::string& p : problems) msg += "\n  " + p;
    throw std::runtime_error(msg);
  }
  ck.VerifyAll();

  // Engram (layers.N.engram.*): q * k and wkv held now (wkv at --weights), the tables read row by row from the
  // shard during the forward (engine/engram.h); the class table comes from dir/tokenizer.json.
  if (!c.engram_layers.empty()) {
    EngramOptions eo;
    eo.weights = options.weights;  // wkv held like every matmul weight
    m->engram_ = LoadAllEngrams(ck, dir, c, eo);
  }
  // DSpark stages (mtp.S.*) are loaded below beside the backbone (engine/dspark.h). Vision tensors are ignored.
  if (options.mmap_weights) spdlog::debug("model {}: --mmap-weights ignored for the released layout (every weight is dequantised)", dir);

  // The plan: every Weight of Model and the released tensor it comes from.
  std::vector<Planned> plan;
  const int64_t d = c.dim, H = c.n_heads, hd = c.head_dim, qr = c.q_lora_rank, hc = c.hc_mult;
  auto add = [&](const std::string& name, Weight* w, int64_t rows, int64_t cols, bool expert = false) {
    plan.push_back({name, w, rows, cols, expert});
  };
  add("embed.weight", &m->embed_, c.vocab_size, d);
  add("norm.weight", &m->norm_, d, 1);
  add("head.weight", &m->head_, c.vocab_size, d);
  m->layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights& w = m->layers_[size_t(l)];
    add(p + "attn_norm.weight", &w.attn_norm, d, 1);
    add(p + "ffn_norm.weight", &w.ffn_norm, d, 1);
    if (hc > 1) {
      const int64_t mix = (2 + hc) * hc;
      add(p + "hc_attn_fn", &w.hc_attn_fn, mix, hc * d);
      add(p + "hc_attn_base", &w.hc_attn_base, mix, 1);
      add(p + "hc_attn_scale", &w.hc_attn_scale, 3, 1);
      add(p + "hc_ffn_fn", &w.hc_ffn_fn, mix, hc * d);
      add(p + "hc_ffn_base", &w.hc_ffn_base, mix, 1);
      add(p + "hc_ffn_scale", &w.hc_ffn_scale, 3, 1);
    }
    add(p + "attn.wq_a.weight", &w.wq_a, qr, d);
    add(p + "attn.q_norm.weight", &w.q_norm, qr, 1);
    add(p + "attn.wq_b.weight", &w.wq_b, H * hd, qr);
    add(p + "attn.wkv.weight", &w.wkv, hd, d);
    add(p + "attn.kv_norm.weight", &w.kv_norm, hd, 1);
    add(p + "attn.attn_sink", &w.sink, H, 1);
    // [G * R, (H / G) * c]: group g's [R, (H/G) c] block in rows g*R..(g+1)*R, as Cedar stacks them.
    add(p + "attn.wo_a.weight", &w.wo_a, int64_t(c.o_groups) * c.o_group_rank, H * hd / c.o_groups);
    add(p + "attn.wo_b.weight", &w.wo_b, d, int64_t(c.o_groups) * c.o_group_rank);
    if (c.IsKvSource(l)) {
      add(p + "attn.compressor.wkv.weight", &w.comp_wkv, hd, d);
      if (c.RatioOf(l) == 2) add(p + "attn.compressor.wgate.weight", &w.comp_wz, hd, d);
      add(p + "attn.compressor.norm.weight", &w.comp_norm, hd, 1);
      add(p + "attn.indexer.wk.weight", &w.idx_wk, c.index_head_dim, hd);
      add(p + "attn.indexer.k_norm.weight", &w.idx_k_norm, c.index_head_dim, 1);
    }
    if (c.IsIndexSource(l)) {
      add(p + "attn.indexer.wq_b.weight", &w.idx_wq_b, int64_t(c.index_heads) * c.index_head_dim, qr);
      add(p + "attn.indexer.weights_proj.weight", &w.idx_wproj, c.index_heads, d);
    }
    add(p + "ffn.gate.weight", &w.gate, c.n_routed_experts, d);
    add(p + "ffn.gate.bias", &w.gate_bias, c.n_routed_experts, 1);  // text routing; ffn.gate.bias_vl (images) not loaded
    w.experts.resize(size_t(c.n_routed_experts));
    const int64_t I = c.moe_inter_dim;
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      add(q + "w1.weight", &w.experts[size_t(e)].w1, I, d, true);
      add(q + "w2.weight", &w.experts[size_t(e)].w2, d, I, true);
      add(q + "w3.weight", &w.experts[size_t(e)].w3, I, d, true);
    }
    if (c.n_shared_experts == 1) {
      add(p + "ffn.shared_experts.w1.weight", &w.shared.w1, I, d);
      add(p + "ffn.shared_experts.w2.weight", &w.shared.w2, d, I);
      add(p + "ffn.shared_experts.w3.weight", &w.shared.w3, I, d);
    }
  }

  // DSpark (mtp.S.*): each stage as a backbone layer without compressor/indexer, with its own bank
  // of dspark_n_routed_experts experts (routed experts like the backbone's: under --max-ram they are
  // read on demand through the ExpertCache as "layer" n_layers + S), plus stage 0's
  // main_proj/main_norm and the last stage's norm and heads.
  if (v.n_mtp_layers > 0) {
    m->dspark_ = std::make_unique<DSparkWeights>();
    DSparkWeights& ds = *m->dspark_;
    ds.target_layers = v.dspark_target_layer_ids;
    ds.block_size = v.dspark_block_size;
    ds.noise_token = v.dspark_noise_token_id;
    ds.rank = v.dspark_markov_rank;
    ds.n_experts = v.dspark_n_routed_experts;
    ds.experts_per_token = v.dspark_n_activated_experts;
    for (int t : ds.target_layers)
      if (t < 0 || t >= c.n_layers)
        throw std::runtime_error("model: " + config_path + ": text_config.dspark_target_layer_ids: expected layers in [0, " +
                                 std::to_string(c.n_layers) + "), found " + std::to_string(t));
    // dspark_noise_token_id is checked when a drafter is made (engine/dspark.h): a model whose
    // noise id lies past its vocabulary still loads and decodes, only without speculation.
    ds.stages.resize(size_t(v.n_mtp_layers));
    const int64_t I = c.moe_inter_dim;
    for (int s = 0; s < v.n_mtp_layers; ++s) {
      const std::string p = "mtp." + std::to_string(s) + ".";
      LayerWeights& w = ds.stages[size_t(s)];
      add(p + "attn_norm.weight", &w.attn_norm, d, 1);
      add(p + "ffn_norm.weight", &w.ffn_norm, d, 1);
      if (hc > 1) {
        const int64_t mix = (2 + hc) * hc;
        add(p + "hc_attn_fn", &w.hc_attn_fn, mix, hc * d);
        add(p + "hc_attn_base", &w.hc_attn_base, mix, 1);
        add(p + "hc_attn_scale", &w.hc_attn_scale, 3, 1);
        add(p + "hc_ffn_fn", &w.hc_ffn_fn, mix, hc * d);
        add(p + "hc_ffn_base", &w.hc_ffn_base, mix, 1);
        add(p + "hc_ffn_scale", &w.hc_ffn_scale, 3, 1);
      }
      add(p + "attn.wq_a.weight", &w.wq_a, qr, d);
      add(p + "attn.q_norm.weight", &w.q_norm, qr, 1);
      add(p + "attn.wq_b.weight", &w.wq_b, H * hd, qr);
      add(p + "attn.wkv.weight", &w.wkv, hd, d);
      add(p + "attn.kv_norm.weight", &w.kv_norm, hd, 1);
      add(p + "attn.attn_sink", &w.sink, H, 1);
      add(p + "attn.wo_a.weight", &w.wo_a, int64_t(c.o_groups) * c.o_group_rank, H * hd / c.o_groups);
      add(p + "attn.wo_b.weight", &w.wo_b, d, int64_t(c.o_groups) * c.o_group_rank);
      add(p + "ffn.gate.weight", &w.gate, ds.n_experts, d);
      add(p + "ffn.gate.bias", &w.gate_bias, ds.n_experts, 1);
      w.experts.resize(size_t(ds.n_experts));
      for (int e = 0; e < ds.n_experts; ++e) {
        const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
        add(q + "w1.weight", &w.experts[size_t(e)].w1, I, d, true);
        add(q + "w2.weight", &w.experts[size_t(e)].w2, d, I, true);
        add(q + "w3.weight", &w.experts[size_t(e)].w3, I, d, true);
      }
      if (c.n_shared_experts == 1) {
        add(p + "ffn.shared_experts.w1.weight", &w.shared.w1, I, d);
        add(p + "ffn.shared_experts.w2.weight", &w.shared.w2, d, I);
        add(p + "ffn.shared_experts.w3.weight", &w.shared.w3, I, d);
      }
      if (s == 0) {
        add(p + "main_proj.weight", &ds.main_proj, d, d * int64_t(ds.target_layers.size()));
        add(p + "main_norm.weight", &ds.main_norm, d, 1);
      }
      if (s == v.n_mtp_layers - 1) {
        add(p + "norm.weight", &ds.norm, d, 1);
        add(p + "markov_head.embed.weight", &ds.markov_embed, c.vocab_size, ds.rank);
        add(p + "markov_head.head.weight", &ds.markov_head, c.vocab_size, ds.rank);
        add(p + "confidence_head.proj.weight", &ds.confidence, 1, d + ds.rank);
      }
    }
  }

  // Sizes before any allocation; shapes checked against what the forward reads.
  std::map<std::string, int64_t> expert_held;  // bytes of each routed expert as held
  for (const Planned& t : plan) {
    const auto [rows, cols] = ck.LogicalShape(t.name);
    if (rows * cols != t.rows * t.cols || (cols != 1 && (rows != t.rows || cols != t.cols)))
      throw std::runtime_error("model: " + dir + ": tensor '" + t.name + "': expected [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                               "] after dequantisation, found [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    const int64_t held = HeldBytes(HeldType(ck, t.name, t.rows, t.cols, options.weights), t.rows, t.cols);
    (t.expert ? report->expert_bytes : report->dense_bytes) += held;
    if (t.expert) {  // "layers.L.ffn.experts.E.w1.weight" -> "layers.L.ffn.experts.E": w1 + w2 + w3
      const std::string tensor = t.name.substr(0, t.name.rfind('.'));
      expert_held[tensor.substr(0, tensor.rfind('.'))] += held;
    }
  }
  // The largest routed expert as held at this precision (F32: 3 x inter x d x 4 bytes).
  int64_t one_expert = 0;
  for (const auto& [prefix, bytes] : expert_held) one_expert = std::max(one_expert, bytes);
  const int64_t budget = options.max_ram_bytes;
  if (budget > 0 && report->dense_bytes > budget)
    throw std::runtime_error("model: " + dir + ": the dense weights need " + std::to_string(report->dense_bytes) + " bytes (" + MiB(report->dense_bytes) +
                             ", at --weights " + WeightPrecisionName(options.weights) + "), more than --max-ram " + std::to_string(budget) + " bytes (" + MiB(budget) + ")");
  // Experts on demand when they do not all fit: an LRU of dequantised experts within what the
  // dense part leaves (engine/expert_cache.h). One token's FFN pins experts_per_token of them.
  const bool on_demand = budget > 0 && report->dense_bytes + report->expert_bytes > budget;
  if (on_demand && budget - report->dense_bytes < int64_t(c.experts_per_token) * one_expert)
    throw std::runtime_error("model: " + dir + ": the dense weights (" + std::to_string(report->dense_bytes) + " bytes) fit --max-ram " +
                             std::to_string(budget) + " bytes, but the routed experts (" + std::to_string(report->expert_bytes) +
                             " bytes in all) do not, and the " + std::to_string(budget - report->dense_bytes) +
                             " bytes left hold fewer than the " + std::to_string(c.experts_per_token) + " experts of one token (" +
                             std::to_string(int64_t(c.experts_per_token) * one_expert) + " bytes) that on-demand experts need");
  // What this load will hold (the arena, or under --max-ram its budget) against the machine's
  // memory. Past it the arena's mapping is refused with a bare ENOMEM (or, within RAM + swap, the
  // load pages for hours): refused here instead, naming what would fit.
  const int64_t memory = options.machine_memory_bytes > 0 ? options.machine_memory_bytes : kernels::PhysicalMemoryBytes();
  if (memory > 0 && on_demand && budget > memory)
    throw std::runtime_error("model: " + dir + ": --max-ram " + std::to_string(budget) + " bytes (" + MiB(budget) +
                             ") is more than this machine's memory, " + std::to_string(memory) + " bytes (" + MiB(memory) + ")");
  if (memory > 0 && !on_demand && report->dense_bytes + report->expert_bytes > memory) {
    const int64_t need = report->dense_bytes + report->expert_bytes;
    int64_t as_stored = 0;
    for (const Planned& t : plan) as_stored += HeldBytes(HeldType(ck, t.name, t.rows, t.cols, WeightPrecision::kAsStored), t.rows, t.cols);
    std::string fits;
    if (options.weights != WeightPrecision::kAsStored && as_stored <= memory)
      fits = "--weights as-stored holds them as released in " + std::to_string(as_stored) + " bytes (" + MiB(as_stored) + "); ";
    throw std::runtime_error("model: " + dir + ": the weights held at --weights " + WeightPrecisionName(options.weights) + " need " +
                             std::to_string(need) + " bytes (" + MiB(need) + "), more than this machine's memory, " + std::to_string(memory) +
                             " bytes (" + MiB(memory) + "); " + fits + "--max-ram BYTES reads the routed experts on demand from the "
                             "shards (`cedar info --model " + dir + " --weights W` prints what each precision holds)");
  }
  const auto t1 = std::chrono::steady_clock::now();
  report->check_seconds = Seconds(t0, t1);

  const double cpu0 = ThreadCpuSeconds();
  m->arena_ = std::make_unique<WeightArena>(size_t(report->dense_bytes + (on_demand ? 0 : report->expert_bytes)));
  // A matmul weight held in another type than F32: converted (bf16, int8) or its released bytes
  // and scales copied as they are (as-stored FP8 / FP4 / BF16), each part 64-byte aligned
  // (engine/v41_held.h: the expert cache holds on-demand experts the same way).
  auto hold = [&](const std::string& name, kernels::WeightType held, Weight* w) {
    HoldWeight(ck, name, held, w, [&](size_t bytes) { return m->AllocateBytes(bytes); });
  };
  std::string shard = ck.ShardOf(plan.front().name);
  for (const Planned& t : plan) {
    if (t.expert && on_demand) {  // read when routed (ExpertCache), at the same held type
      if (IsMatmulTensor(t.name)) m->CountMatmul(t.name, t.rows, t.cols, HeldType(ck, t.name, t.rows, t.cols, options.weights));
      continue;
    }
    const std::string s = ck.ShardOf(t.name);
    if (s != shard) {
      ck.ReleasePages();  // the previous shard is in the arena now: keep only one shard's pages resident
      shard = s;
    }
    t.dst->rows = t.rows;
    t.dst->cols = t.cols;
    const kernels::WeightType held = HeldType(ck, t.name, t.rows, t.cols, options.weights);
    if (held == kernels::WeightType::kF32) {
      float* dst = m->arena_->Allocate(size_t(t.rows * t.cols));
      ck.DequantizeWeightInto(t.name, dst);
      t.dst->data = dst;
    } else {
      hold(t.name, held, t.dst);
    }
    if (IsMatmulTensor(t.name)) m->CountMatmul(t.name, t.rows, t.cols, held);
    const TensorInfo& info = ck.Get(t.name);
    report->stored_bytes += int64_t(info.nbytes);
    if (info.dtype == DType::F8_E4M3 || info.dtype == DType::I8) {
      const std::string prefix = t.name.substr(0, t.name.size() - 7);  // quantised tensors end in ".weight"
      report->stored_bytes += int64_t(ck.Get(prefix + ".scale").nbytes);
    }
    ++report->tensors;
  }
  ck.ReleasePages();
  const auto t2 = std::chrono::steady_clock::now();
  report->dequant_seconds = Seconds(t1, t2);
  const double dequant_cpu = ThreadCpuSeconds() - cpu0;
  if (on_demand) {
    m->expert_cache_ = std::make_shared<const ExpertCache>(std::move(owned_ck), c, budget - report->dense_bytes, options.weights);
    spdlog::info("model {}: routed experts ({}) exceed --max-ram {} beside the dense weights ({}): read on demand, at most {} resident",
                 dir, MiB(report->expert_bytes), MiB(budget), MiB(report->dense_bytes),
                 (budget - report->dense_bytes) / one_expert);
  }
  m->fingerprint_ = ReleasedFingerprint(dir, config_path);
  m->precision_ = options.weights;
  if (options.weights != WeightPrecision::kF32) {  // other numbers: other cache keys (8-bit activations too)
    const std::string tag = std::string(WeightPrecisionName(options.weights)) + (kernels::Int8Activations() ? "+int8-activations" : "") +
                            (kernels::Bf16Activations() ? "+bf16-activations" : "");
    m->fingerprint_ ^= XXH3_64bits(tag.data(), tag.size());
  }
  report->total_seconds = Seconds(t0, std::chrono::steady_clock::now());
  spdlog::info("model {}: released layout, {} tensors, {} stored -> {} held at --weights {} ({} dense + {} experts); check {:.3f}s, dequantise {:.3f}s ({:.3f}s CPU, {:.0f} MB/s stored per CPU second), total {:.3f}s",
               dir, report->tensors, MiB(report->stored_bytes), MiB(report->dense_bytes + report->expert_bytes),
               WeightPrecisionName(options.weights), MiB(report->dense_bytes),
               MiB(report->expert_bytes), report->check_seconds, report->dequant_seconds, dequant_cpu,
               dequant_cpu > 0 ? double(report->stored_bytes) / 1e6 / dequant_cpu : 0.0, report->total_seconds);
  m->released_load_ = std::move(report);
  return m;
}

}  // namespace cedar
