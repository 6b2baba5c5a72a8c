// Model files: presets validate, BF16 loads, and every defect gives an error that names it.
#include <cstring>
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/info.h"
#include "engine/init.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::TempDir;

namespace {

std::string ErrorOf(const std::string& dir) {
  try {
    Model::Load(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string TinyDir(bool bf16 = false) {
  ModelConfig c;
  PresetConfig("tiny", &c);
  std::string dir = TempDir("files");
  WriteRandomModel(c, 3, dir, bf16);
  return dir;
}

void Rewrite(const std::string& path, const std::function<void(std::string&)>& edit) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  edit(s);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << s;
}

}  // namespace

TEST_CASE("every preset validates and info reproduces the V4.1-Flash figures") {
  for (const std::string& name : PresetNames()) {
    ModelConfig c;
    REQUIRE(PresetConfig(name, &c));
    CHECK(c.Validate() == "");
  }
  ModelConfig flash;
  PresetConfig("flash", &flash);
  ModelInfo i = ComputeInfo(flash);
  CHECK(flash.StaircaseLength() == 2541);
  // Seed article: ~8B active per prefill token, ~16B per decode token, ~374M per layer.
  CHECK(i.active_per_prefill_token > 7.0e9);
  CHECK(i.active_per_prefill_token < 8.5e9);
  CHECK(i.active_per_decode_token > 15.0e9);
  CHECK(i.active_per_decode_token < 17.0e9);
  ModelConfig small;
  PresetConfig("small", &small);
  const double p = double(ComputeInfo(small).total_params);
  CHECK(p > 100e6);
  CHECK(p < 150e6);
}

TEST_CASE("a BF16 model loads and computes like its F32 twin within BF16 rounding") {
  auto f32 = Model::Load(TinyDir(false));
  auto bf16 = Model::Load(TinyDir(true));
  auto t = cedar::test::RandomTokens(20, 512, 9);
  SequenceState a(f32->config()), b(bf16->config());
  auto ra = Prefill(*f32, a, t, {}), rb = Prefill(*bf16, b, t, {});
  CHECK(cedar::test::RelError(rb.logits, ra.logits) < 0.1);
  CHECK(f32->fingerprint() != bf16->fingerprint());
}

TEST_CASE("weights copied into the huge-page arena compute exactly what the file's weights do") {
  for (bool bf16 : {false, true}) {
    LoadOptions in_place;
    in_place.mmap_weights = true;
    auto copied = Model::Load(TinyDir(bf16)), mapped = Model::Load(TinyDir(bf16), in_place);
    // Different memory (the copy is not a view of the file), the same values.
    CHECK(copied->layer(3).wo_b.data != mapped->layer(3).wo_b.data);
    const Weight& a = copied->layer(3).experts[1].w2;
    const Weight& b = mapped->layer(3).experts[1].w2;
    REQUIRE(a.rows * a.cols == b.rows * b.cols);
    CHECK(std::memcmp(a.data, b.data, size_t(a.rows * a.cols) * sizeof(float)) == 0);
    CHECK(reinterpret_cast<uintptr_t>(a.data) % 64 == 0);
    auto t = cedar::test::RandomTokens(40, 512, 11);
    SequenceState sa(copied->config()), sb(mapped->config());
    auto ra = Prefill(*copied, sa, t, {}), rb = Prefill(*mapped, sb, t, {});
    CHECK(ra.logits == rb.logits);
    CHECK(copied->fingerprint() == mapped->fingerprint());
  }
}

TEST_CASE("invalid configs are refused with what was expected and what was found") {
  ModelConfig c;
  PresetConfig("tiny", &c);
  c.compress_ratios[4] = 2;
  CHECK(c.Validate().find("compress_ratios[E=4]: expected 1") != std::string::npos);
  PresetConfig("tiny", &c);
  c.kv_source_layers = {1, 3, 4, 6};
  CHECK(c.Validate().find("no kv source after E") != std::string::npos);
  PresetConfig("tiny", &c);
  c.candidate_block_size = 4;
  c.candidate_blocks = 2;
  CHECK(c.Validate().find("(candidate_blocks - 1) * candidate_block_size >= index_topk") != std::string::npos);
  PresetConfig("tiny", &c);
  c.rope_dim = 7;
  CHECK(c.Validate().find("rope_dim") != std::string::npos);
  PresetConfig("tiny", &c);
  c.compress_ratios.pop_back();
  CHECK(c.Validate().find("compress_ratios: expected 8 entries") != std::string::npos);

  const std::string dir = TinyDir();
  Rewrite(dir + "/config.json", [](std::string& s) {
    auto j = nlohmann::json::parse(s);
    j["n_heads"] = "four";
    s = j.dump();
  });
  CHECK(ErrorOf(dir).find("field 'n_heads' has the wrong type") != std::string::npos);
  Rewrite(dir + "/config.json", [](std::string& s) { s = "{not json"; });
  CHECK(ErrorOf(dir).find("not valid JSON") != std::string::npos);
}

TEST_CASE("bad weight files give a clear error naming the defect") {
  SUBCASE("truncated") {
    const std::string dir = TinyDir();
    const auto path = dir + "/model.safetensors";
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
    CHECK(ErrorOf(dir).find("outside the file (truncated?)") != std::string::npos);
    std::filesystem::resize_file(path, 4);
    CHECK(ErrorOf(dir).find("too short for a header") != std::string::npos);
  }
  SUBCASE("missing tensor, wrong shape, wrong dtype") {
    ModelConfig c;
    PresetConfig("tiny", &c);
    auto write_with = [&](const std::function<void(const TensorSpec&, SafetensorsWriter&)>& add) {
      const std::string dir = TempDir("bad");
      WriteRandomModel(c, 1, dir);
      SafetensorsWriter w;
      for (const TensorSpec& t : RequiredTensors(c)) add(t, w);
      w.Write(dir + "/model.safetensors");
      return dir;
    };
    auto zeros = [](const TensorSpec& t) {
      int64_t n = 1;
      for (auto s : t.shape) n *= s;
      return std::vector<float>(size_t(n), 0.0f);
    };
    const std::string victim = "layers.3.attn.compressor.wz.weight";
    std::string d1 = write_with([&](const TensorSpec& t, SafetensorsWriter& w) {
      if (t.name != victim) w.AddF32(t.name, t.shape, zeros(t).data());
    });
    CHECK(ErrorOf(d1).find("missing tensor '" + victim + "'") != std::string::npos);
    std::string d2 = write_with([&](const TensorSpec& t, SafetensorsWriter& w) {
      auto v = zeros(t);
      if (t.name == victim) w.AddF32(t.name, {t.shape[1], t.shape[0]}, v.data());
      else w.AddF32(t.name, t.shape, v.data());
    });
    CHECK(ErrorOf(d2).find("tensor '" + victim + "': expected shape [32, 64], found [64, 32]") != std::string::npos);
    std::string d3 = write_with([&](const TensorSpec& t, SafetensorsWriter& w) {
      auto v = zeros(t);
      if (t.name == victim) {
        std::vector<int32_t> iv(v.size(), 0);
        w.AddI32(t.name, t.shape, iv.data());
      } else {
        w.AddF32(t.name, t.shape, v.data());
      }
    });
    CHECK(ErrorOf(d3).find("expected dtype F32 or BF16, found I32") != std::string::npos);
  }
  SUBCASE("missing directory") { CHECK(ErrorOf("/nonexistent/cedar-model").find("cannot open") != std::string::npos); }
}
