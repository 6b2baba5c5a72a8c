// Shared by the tests of speculative decoding in the server (--spec-tokens): v41-tiny with its
// DSpark layers written by `cedar init --arch v41`'s code (vocabulary cut to 1024 ids, as the
// engine's speculative tests do) and shared, and a drafter whose proposals are known.
#pragma once
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "engine/speculative.h"
#include "engine/v41_init.h"

namespace spec_serve_test {

using namespace cedar;

// v41-tiny (one DSpark block of 5) in the released layout, loaded once per process.
inline std::shared_ptr<const Model> V41Tiny() {
  struct Written {
    std::filesystem::path dir;
    std::shared_ptr<const Model> m;
    Written() {
      dir = std::filesystem::temp_directory_path() / ("cedar_spec_serve_" + std::to_string(::getpid()));
      std::filesystem::remove_all(dir);
      V41Config c;
      REQUIRE(V41PresetConfig("v41-tiny", &c));
      c.vocab_size = 1024;
      c.dspark_noise_token_id = 1000;  // the preset's 128799 lies past the cut vocabulary
      WriteReleasedModel(c, 7, dir.string());
      m = Model::Load(dir.string());
    }
    ~Written() { std::filesystem::remove_all(dir); }
  };
  static Written w;
  return w.m;
}

// Drafts the model's own greedy continuation (decoded from a copy of the state), with the draft
// at every position p where p % 5 == 2 replaced by another token: passes then see every draft
// kept, rejections at every draft index, and stop tokens inside the kept drafts.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(const Model& m) : m_(m) {}
  void Propose(const SequenceState& st, int32_t anchor, int k, const SamplingParams&, std::mt19937_64&,
               std::vector<int32_t>* drafts, std::vector<std::vector<double>>*) override {
    drafts->clear();
    SequenceState c = CopyState(st, m_.config());
    int32_t t = anchor;
    for (int i = 0; i < k; ++i) {
      t = Argmax(DecodeStep(m_, c, t));
      const bool corrupt = (st.pos + 1 + i) % 5 == 2;
      drafts->push_back(corrupt ? (t + 1) % m_.config().vocab_size : t);
    }
  }

 private:
  const Model& m_;
};

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace spec_serve_test
