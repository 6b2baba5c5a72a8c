#include "tests/test_models.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <random>

#include "engine/init.h"

namespace cedar::test {

namespace {
std::vector<std::string>& Dirs() {
  static std::vector<std::string> dirs;
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] {
      for (auto& d : Dirs()) std::filesystem::remove_all(d);
    });
  }
  return dirs;
}
}  // namespace

std::string TempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("cedar-" + tag + "-XXXXXX")).string();
  char* p = mkdtemp(tmpl.data());
  if (!p) throw std::runtime_error("mkdtemp failed");
  Dirs().push_back(p);
  return p;
}

const Model& TinyModel() { return PresetModel("tiny"); }

std::shared_ptr<const Model> SharedPresetModel(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Model>> models;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& m = models[name];
  if (!m) {
    ModelConfig c;
    if (name == "tiny-hc-softmax") {
      PresetConfig("tiny-hc", &c);
      c.hc_mult = 2;
      c.score_func = "softmax";
      c.norm_topk_prob = false;
    } else if (!PresetConfig(name, &c)) {
      throw std::invalid_argument("PresetModel: unknown preset " + name);
    }
    m = MakeModel(c, 1);
  }
  return m;
}

const Model& PresetModel(const std::string& name) { return *SharedPresetModel(name); }

const Model& TinyKvqModel() { return PresetModel("tiny-kvq"); }

std::unique_ptr<const Model> MakeModel(const ModelConfig& c, uint64_t seed) {
  const std::string dir = TempDir("model");
  WriteRandomModel(c, seed, dir);
  return Model::Load(dir);
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

double KlDivergence(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto logsoftmax = [](const std::vector<float>& x) {
    double m = -INFINITY, s = 0;
    for (float v : x) m = std::max(m, double(v));
    for (float v : x) s += std::exp(double(v) - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - m - std::log(s);
    return out;
  };
  auto lp = logsoftmax(p_logits), lq = logsoftmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}

}  // namespace cedar::test
