// Shared by the speculative decoding tests: v41-tiny written in the released layout into a temp
// dir (vocabulary cut to 1024 ids, as v41_load_test does), loaded once per binary.
#pragma once
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "engine/v41_init.h"

namespace spec_test {

using namespace cedar;
namespace fs = std::filesystem;


struct TinyModel {
  fs::path dir;
  std::unique_ptr<const Model> m;
  explicit TinyModel(const std::string& tag) {
    dir = fs::temp_directory_path() / ("cedar_spec_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    V41Config c;
    REQUIRE(V41PresetConfig("v41-tiny", &c));
    c.vocab_size = 1024;
    c.dspark_noise_token_id = 1000;  // the preset's 128799 lies past the cut vocabulary
    WriteReleasedModel(c, 7, dir.string());
    m = Model::Load(dir.string());
  }
  ~TinyModel() { fs::remove_all(dir); }
};

inline const Model& Tiny() {
  static TinyModel t(std::to_string(::getpid()));
  return *t.m;
}

inline std::vector<int32_t> Tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(g() % uint64_t(vocab));
  return t;
}

inline PrefillResult PrefillBounded(const Model& m, SequenceState& st, const std::vector<int32_t>& t) {
  PrefillOptions o;
  o.mode = PrefillMode::kBounded;
  return Prefill(m, st, t, o);
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace spec_test
