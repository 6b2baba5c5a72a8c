#include "engine/init.h"

#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/int8_file.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "kernels/weight_view.h"

namespace cedar {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<float> RandomTensor(const ModelConfig& c, const TensorSpec& t, uint64_t seed) {
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  const std::string& name = t.name;
  if (EndsWith(name, "norm.weight")) {
    std::fill(v.begin(), v.end(), 1.0f);
    return v;
  }
  if (EndsWith(name, "attn.sink")) {
    std::fill(v.begin(), v.end(), 0.0f);
    return v;
  }
  double stddev;
  std::mt19937_64 rng(seed ^ XXH3_64bits(name.data(), name.size()));
  if (name.find(".hc_") != std::string::npos && !EndsWith(name, "_fn")) {
    // mHC base ~ N(0, 0.5^2): pre and post away from 0 and 1 without saturating, comb near
    // uniform; scale ~ 0.5 + N(0, 0.1^2) (as tools/reference/init.py).
    const bool base = EndsWith(name, "_base");
    std::normal_distribution<float> dist(base ? 0.0f : 0.5f, base ? 0.5f : 0.1f);
    for (float& x : v) x = dist(rng);
    return v;
  }
  // (mHC fn falls through to N(0, 1/fan_in): it meets RMS-normalised streams, mixes of unit size.)
  if (name == "embed.weight") stddev = 1.0;
  else if (EndsWith(name, "gate.bias")) stddev = 0.01;
  else {
    const int64_t fan_in = t.shape.back();
    stddev = 1.0 / std::sqrt(double(fan_in));
    if (EndsWith(name, "wo_b.weight") || EndsWith(name, "w2.weight")) stddev /= std::sqrt(2.0 * c.n_layers);
  }
  std::normal_distribution<float> dist(0.0f, float(stddev));
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

InitDType ParseInitDType(const std::string& s) {
  if (s == "f32") return InitDType::kF32;
  if (s == "bf16") return InitDType::kBF16;
  if (s == "int8") return InitDType::kI8;
  throw std::invalid_argument("--dtype: expected f32, bf16 or int8, found '" + s + "'");
}

void WriteRandomModel(const ModelConfig& c, uint64_t seed, const std::string& dir, bool bf16) {
  WriteRandomModel(c, seed, dir, bf16 ? InitDType::kBF16 : InitDType::kF32);
}

void WriteRandomModel(const ModelConfig& c, uint64_t seed, const std::string& dir, InitDType dtype) {
  const std::string problems = c.Validate();
  if (!problems.empty()) throw std::runtime_error("init: invalid config:\n" + problems);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("init: cannot create " + dir + ": " + ec.message());
  SafetensorsWriter w;
  for (const TensorSpec& t : RequiredTensors(c)) {
    std::vector<float> v = RandomTensor(c, t, seed);
    if (dtype == InitDType::kBF16) {
      w.AddBF16(t.name, t.shape, v.data());
    } else if (dtype == InitDType::kI8 && IsMatmulTensor(t.name)) {
      // [rows, cols] with rows every dim but the last (wo_a's groups stacked, as the loader reads it).
      const int64_t cols = t.shape.back(), rows = int64_t(v.size()) / cols, nb = (cols + kernels::kQuantBlock - 1) / kernels::kQuantBlock;
      std::vector<int8_t> q(v.size());
      std::vector<uint16_t> scales(size_t(rows * nb));  // bfloat16 bits
      kernels::QuantizeI8(v.data(), rows, cols, q.data(), scales.data());
      std::vector<int64_t> scale_shape = t.shape;
      scale_shape.back() = nb;
      w.AddRaw(t.name, DType::I8, t.shape, q.data(), q.size());
      w.AddRaw(Int8ScaleName(t.name), DType::BF16, scale_shape, scales.data(), scales.size() * sizeof(uint16_t));
    } else {
      w.AddF32(t.name, t.shape, v.data());
    }
  }
  w.SetMetadata("generator", "cedar init");
  w.SetMetadata("seed", std::to_string(seed));
  w.Write(dir + "/model.safetensors");
  std::ofstream cfg(dir + "/config.json");
  if (!cfg) throw std::runtime_error("init: cannot write " + dir + "/config.json");
  cfg << ConfigToJson(c).dump(2) << "\n";
}

}  // namespace cedar
