#include "engine/checkpoint_index.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/quant_formats.h"
#include "kernels/thread_pool.h"

namespace cedar {

namespace {
bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (IsFile(index_path)) {
    sharded_ = true;
    std::ifstream f(index_path);
    nlohmann::json j;
    try {
      f >> j;
    } catch (const std::exception& e) {
      throw std::runtime_error(index_path + ": not valid JSON: " + std::string(e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw std::runtime_error(index_path + ": weight_map: expected an object {tensor: shard file}, found " +
                               (j.is_object() && j.contains("weight_map") ? j["weight_map"].dump().substr(0, 80) : std::string("nothing")));
    if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")) {
      const auto& ts = j["metadata"]["total_size"];
      if (!ts.is_number_unsigned() && !ts.is_number_integer())
        throw std::runtime_error(index_path + ": metadata.total_size: expected an integer, found " + ts.dump());
      total_size_ = ts.get<uint64_t>();
    }
    std::set<std::string> files;
    for (auto& [name, v] : j["weight_map"].items()) {
      if (!v.is_string()) throw std::runtime_error(index_path + ": weight_map." + name + ": expected a shard file name, found " + v.dump());
      const std::string file = v.get<std::string>();
      if (file.find('/') != std::string::npos || file.empty() || file[0] == '.')
        throw std::runtime_error(index_path + ": weight_map." + name + ": expected a file name in the same directory, found \"" + file + "\"");
      weight_map_[name] = file;
      files.insert(file);
    }
    for (const std::string& file : files)
      if (!IsFile(dir + "/" + file)) throw std::runtime_error(index_path + ": shard " + file + " is named by the index but missing from " + dir);
    spdlog::debug("checkpoint {}: {} tensors over {} shards", dir, weight_map_.size(), files.size());
  } else {
    const std::string single = dir + "/model.safetensors";
    if (!IsFile(single)) throw std::runtime_error(dir + ": expected model.safetensors.index.json or model.safetensors, found neither");
    const SafetensorsFile& f = Shard("model.safetensors");
    for (const auto& [name, t] : f.Tensors()) weight_map_[name] = "model.safetensors";
  }
}

const SafetensorsFile& Checkpoint::Shard(const std::string& file) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shards_.find(file);
  if (it != shards_.end()) return *it->second;
  auto f = std::make_unique<SafetensorsFile>(dir_ + "/" + file);
  if (sharded_) {
    // Every tensor the index places in this shard must be in its header.
    for (const auto& [name, shard] : weight_map_)
      if (shard == file && !f->Find(name))
        throw std::runtime_error(dir_ + "/model.safetensors.index.json: tensor '" + name + "' is mapped to " + file + ", which does not hold it");
  }
  const SafetensorsFile& ref = *f;
  shards_[file] = std::move(f);
  return ref;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> out;
  out.reserve(weight_map_.size());
  for (const auto& [name, file] : weight_map_) out.push_back(name);
  return out;
}

std::string Checkpoint::ShardOf(const std::string& name) const {
  auto it = weight_map_.find(name);
  return it == weight_map_.end() ? std::string() : it->second;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) return nullptr;
  return Shard(it->second).Find(name);
}

const TensorInfo& Checkpoint::Get(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (!t) throw std::runtime_error(dir_ + ": missing tensor '" + name + "'");
  return *t;
}

uint64_t Checkpoint::VerifyAll() const {
  std::set<std::string> files;
  for (const auto& [name, file] : weight_map_) files.insert(file);
  uint64_t total = 0;
  for (const std::string& file : files) Shard(file);
  for (const auto& [name, file] : weight_map_) total += Get(name).nbytes;
  if (sharded_ && total_size_ != 0 && total != total_size_)
    throw std::runtime_error(dir_ + "/model.safetensors.index.json: metadata.total_size: expected the tensors' byte sum " + std::to_string(total) +
                             ", found " + std::to_string(total_size_));
  return total;
}

namespace {
// What DequantizeWeight needs about one weight: its tensor, its scale (quantised dtypes) and the
// block sizes, checked once for LogicalShape and DequantizeWeightInto alike.
struct QuantView {
  const TensorInfo* w = nullptr;
  const TensorInfo* s = nullptr;  // nullptr for F32 / BF16
  int64_t rows = 0, cols = 0;     // logical shape
  int64_t br = 1, bc = 1;         // FP8 block (rows, cols); FP4: 1 x fp4_block
};
}  // namespace

static QuantView ViewOf(const Checkpoint& ck, const std::string& dir, const std::string& name, int fp4_block) {
  QuantView v;
  const TensorInfo& t = ck.Get(name);
  v.w = &t;
  if (t.dtype == DType::F32 || t.dtype == DType::BF16) {
    v.rows = t.shape.empty() ? 1 : t.shape[0];
    v.cols = t.shape.empty() ? 1 : t.NumElements() / std::max<int64_t>(1, t.shape[0]);
    return v;
  }
  if (t.shape.size() != 2) throw std::runtime_error(dir + ": tensor '" + name + "': expected a 2-D quantised weight, found " + std::to_string(t.shape.size()) + " dims");
  const std::string suffix = ".weight";
  const std::string prefix = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
                                 ? name.substr(0, name.size() - suffix.size())
                                 : name;
  const TensorInfo* s = ck.Find(prefix + ".scale");
  if (!s) throw std::runtime_error(dir + ": tensor '" + name + "' (" + DTypeName(t.dtype) + ") needs its scale '" + prefix + ".scale', which is missing");
  if (s->dtype != DType::F8_E8M0 && s->dtype != DType::U8)
    throw std::runtime_error(dir + ": tensor '" + prefix + ".scale': expected F8_E8M0, found " + DTypeName(s->dtype));
  if (s->shape.size() != 2) throw std::runtime_error(dir + ": tensor '" + prefix + ".scale': expected 2 dims, found " + std::to_string(s->shape.size()));
  v.s = s;
  v.rows = t.shape[0];
  if (t.dtype == DType::F8_E4M3) {
    v.cols = t.shape[1];
    // Block sizes follow from the two shapes: ceil(rows / br) = scale rows, ceil(cols / bc) = scale cols.
    const int64_t sr = s->shape[0], sc = s->shape[1];
    if (sr < 1 || sc < 1) throw std::runtime_error(dir + ": tensor '" + prefix + ".scale': expected a non-empty shape");
    v.br = (v.rows + sr - 1) / sr;
    v.bc = (v.cols + sc - 1) / sc;
    if ((v.rows + v.br - 1) / v.br != sr || (v.cols + v.bc - 1) / v.bc != sc)
      throw std::runtime_error(dir + ": tensor '" + prefix + ".scale': shape [" + std::to_string(sr) + ", " + std::to_string(sc) +
                               "] does not tile the weight [" + std::to_string(v.rows) + ", " + std::to_string(v.cols) + "] in equal blocks");
    return v;
  }
  if (t.dtype == DType::I8 || t.dtype == DType::U8) {
    v.cols = t.shape[1] * 2;
    v.bc = fp4_block;
    if (s->shape[0] != v.rows || s->shape[1] * fp4_block != v.cols)
      throw std::runtime_error(dir + ": tensor '" + prefix + ".scale': expected shape [" + std::to_string(v.rows) + ", " + std::to_string(v.cols / fp4_block) +
                               "] (one scale per " + std::to_string(fp4_block) + " FP4 values), found [" + std::to_string(s->shape[0]) + ", " +
                               std::to_string(s->shape[1]) + "]");
    return v;
  }
  throw std::runtime_error(dir + ": tensor '" + name + "': cannot dequantise dtype " + DTypeName(t.dtype) + " (expected F32, BF16, F8_E4M3 or I8)");
}

std::pair<int64_t, int64_t> Checkpoint::LogicalShape(const std::string& name, int fp4_block) const {
  const QuantView v = ViewOf(*this, dir_, name, fp4_block);
  return {v.rows, v.cols};
}

void Checkpoint::DequantizeWeightInto(const std::string& name, float* out, int fp4_block) const {
  const QuantView v = ViewOf(*this, dir_, name, fp4_block);
  const TensorInfo& t = *v.w;
  // On the pool's threads, each part its own rows (at load, and on demand under --max-ram while
  // decoding); ViewOf has checked the shapes, so no part throws.
  if (t.dtype == DType::F32 || t.dtype == DType::BF16) {
    FloatsInto(t, out);
  } else if (t.dtype == DType::F8_E4M3) {
    const int64_t scols = (v.cols + v.bc - 1) / v.bc;
    kernels::ParallelFor((v.rows + v.br - 1) / v.br, 1, [&](int64_t b0, int64_t b1) {  // whole rows of blocks
      const int64_t r0 = b0 * v.br, r1 = std::min(v.rows, b1 * v.br);
      kernels::DequantFp8Blocks(t.data + r0 * v.cols, v.s->data + b0 * scols, r1 - r0, v.cols, int(v.br), int(v.bc), out + r0 * v.cols);
    });
  } else {
    const int64_t nb = v.cols / fp4_block;
    kernels::ParallelFor(v.rows, 16, [&](int64_t r0, int64_t r1) {
      kernels::DequantFp4Packed(t.data + r0 * (v.cols / 2), v.s->data + r0 * nb, r1 - r0, v.cols, fp4_block, out + r0 * v.cols);
    });
  }
}

std::vector<float> Checkpoint::DequantizeWeight(const std::string& name, int fp4_block) const {
  const auto [rows, cols] = LogicalShape(name, fp4_block);
  std::vector<float> out(size_t(rows * cols));
  DequantizeWeightInto(name, out.data(), fp4_block);
  return out;
}

void Checkpoint::ReleasePages() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [file, shard] : shards_) shard->ReleasePages();
}

std::vector<std::string> Checkpoint::ShardFiles() const {
  std::set<std::string> files;
  for (const auto& [name, file] : weight_map_) files.insert(file);
  return {files.begin(), files.end()};
}

}  // namespace cedar
