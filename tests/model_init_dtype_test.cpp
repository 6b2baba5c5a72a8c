// `cedar init --dtype int8|bf16` files (issue 20): an INT8 file (`X.weight` I8 + `X.scale` F32 per
// 32 inputs, the rest F32) loaded as stored gives the logits of its F32 twin (same seed) converted
// at load with `--weights int8`, bit for bit: the initialiser and the loader's conversion run the
// same quantiser on the same F32 values, so the held bytes are the same and every product is the
// same code on the same inputs. A BF16 file loaded with `--weights bf16` (its bits kept) equals the
// F32 file of the same values (the BF16 file's values widened: exact) converted at load. An INT8
// file loaded at f32 / bf16 holds q * scale / its BF16 rounding. A missing or misshapen scale is a
// clear error naming the tensor.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/init.h"
#include "engine/safetensors.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::RandomTokens;

namespace {

std::string Written(const std::string& tag, InitDType dt) {
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));
  const std::string d = cedar::test::TempDir("initdt-" + tag);
  WriteRandomModel(c, 5, d, dt);
  return d;
}

std::unique_ptr<const Model> Load(const std::string& dir, WeightPrecision p, bool mmap = false) {
  LoadOptions o;
  o.weights = p;
  o.mmap_weights = mmap;
  return Model::Load(dir, o);
}

// Prefill logits (exact mode, 30 tokens) then two decode steps' logits, concatenated.
std::vector<float> Logits(const Model& m) {
  SequenceState s(m.config());
  PrefillOptions o;
  o.mode = PrefillMode::kExact;
  std::vector<float> out = Prefill(m, s, RandomTokens(30, m.config().vocab_size, 4), o).logits;
  for (int32_t tok : {3, 17}) {
    const std::vector<float> d = DecodeStep(m, s, tok);
    out.insert(out.end(), d.begin(), d.end());
  }
  return out;
}

// Rewrites `dir`'s model with `edit` applied to each tensor (return false to drop it).
void RewriteTensors(const std::string& dir, const std::function<bool(const std::string&, DType&, std::vector<int64_t>&)>& edit) {
  SafetensorsWriter w;
  {
    SafetensorsFile f(dir + "/model.safetensors");
    for (const auto& [name, t] : f.Tensors()) {
      DType dt = t.dtype;
      std::vector<int64_t> shape = t.shape;
      if (!edit(name, dt, shape)) continue;
      size_t n = 1;
      for (int64_t s : shape) n *= size_t(s);
      if (dt == DType::F32 && t.dtype == DType::BF16) {
        w.AddF32(name, shape, f.ReadFloats(name).data());  // a BF16 value widened: exact
      } else {
        std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
        bytes.resize(n * DTypeSize(dt));
        w.AddRaw(name, dt, shape, bytes.data(), bytes.size());
      }
    }
  }
  w.Write(dir + "/model.safetensors");
}

std::string LoadError(const std::string& dir) {
  try {
    Load(dir, WeightPrecision::kAsStored);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("init --dtype int8 loaded as stored == init f32 + --weights int8, bit for bit") {
  const std::string f32_dir = Written("f32", InitDType::kF32), i8_dir = Written("int8", InitDType::kI8);
  {
    SafetensorsFile f(i8_dir + "/model.safetensors");
    REQUIRE(f.Find("head.weight"));
    CHECK(f.Find("head.weight")->dtype == DType::I8);
    REQUIRE(f.Find("head.scale"));
    CHECK(f.Find("head.scale")->dtype == DType::BF16);
    CHECK(f.Find("layers.0.attn.wo_a.scale")->shape.size() == 3);  // [groups, rank, in / 32]
    CHECK(f.Find("embed.weight")->dtype == DType::F32);             // not a matmul weight
    CHECK(f.Find("layers.0.ffn.gate.weight")->dtype == DType::F32);  // the router stays F32
    CHECK(f.Find("layers.0.ffn.experts.1.w2.weight")->dtype == DType::I8);
  }
  auto converted = Load(f32_dir, WeightPrecision::kI8);
  const std::vector<float> want = Logits(*converted);
  for (WeightPrecision p : {WeightPrecision::kAsStored, WeightPrecision::kI8})
    for (bool mmap : {false, true}) {
      CAPTURE(WeightPrecisionName(p));
      CAPTURE(mmap);
      auto m = Load(i8_dir, p, mmap);
      CHECK(m->head().type == kernels::WeightType::kI8);
      CHECK(m->matmul_bytes_per_param() == converted->matmul_bytes_per_param());
      const Weight& a = m->head();
      const Weight& b = converted->head();
      CHECK(std::memcmp(a.stored, b.stored, size_t(a.rows * a.cols)) == 0);
      CHECK(std::memcmp(a.scales, b.scales, size_t(a.rows * (a.cols / 32)) * 2) == 0);  // bfloat16 scales
      CHECK(Logits(*m) == want);
    }
}

TEST_CASE("an INT8 file at f32 holds q * scale, at bf16 its rounding") {
  const std::string i8_dir = Written("int8b", InitDType::kI8);
  auto i8 = Load(i8_dir, WeightPrecision::kAsStored);
  auto f = Load(i8_dir, WeightPrecision::kF32);
  auto b = Load(i8_dir, WeightPrecision::kBF16);
  for (const Weight* w : {&f->head(), &f->layer(1).wo_a, &f->layer(0).experts[1].w2}) REQUIRE(w->data != nullptr);
  const std::vector<std::pair<const Weight*, const Weight*>> pairs = {
      {&i8->head(), &f->head()}, {&i8->layer(1).wo_a, &f->layer(1).wo_a}, {&i8->layer(0).experts[1].w2, &f->layer(0).experts[1].w2}};
  for (auto [q, x] : pairs) {
    const kernels::WeightView v = q->view();
    REQUIRE(x->rows == q->rows);
    REQUIRE(x->cols == q->cols);
    bool same = true;
    for (int64_t r = 0; r < q->rows; ++r)
      for (int64_t c = 0; c < q->cols; ++c) same = same && x->data[r * q->cols + c] == kernels::WeightAt(v, r, c);
    CHECK(same);
  }
  const kernels::WeightView hv = i8->head().view();
  CHECK(b->head().type == kernels::WeightType::kBF16);
  bool same = true;
  for (int64_t r = 0; r < hv.rows; ++r)
    for (int64_t c = 0; c < hv.cols; ++c)
      same = same && static_cast<const uint16_t*>(b->head().stored)[r * hv.cols + c] == kernels::FloatToBf16(kernels::WeightAt(hv, r, c));
  CHECK(same);
  // And the F32 load computes (a model whose weights are those values): logits finite and not i8's only
  // by the products' order (same values, different kernels).
  const std::vector<float> lf = Logits(*f), li = Logits(*i8);
  CHECK(cedar::test::RelError(lf, li) < 1e-4);
}

TEST_CASE("init --dtype bf16 loaded with --weights bf16 == the same values as F32 + --weights bf16, bit for bit") {
  const std::string bf_dir = Written("bf16", InitDType::kBF16);
  const std::string twin = cedar::test::TempDir("initdt-bf16-twin");
  std::filesystem::copy_file(bf_dir + "/config.json", twin + "/config.json", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(bf_dir + "/model.safetensors", twin + "/model.safetensors", std::filesystem::copy_options::overwrite_existing);
  RewriteTensors(twin, [](const std::string&, DType& dt, std::vector<int64_t>&) {
    dt = DType::F32;
    return true;
  });
  auto direct = Load(bf_dir, WeightPrecision::kBF16);
  auto as_stored = Load(bf_dir, WeightPrecision::kAsStored);
  auto converted = Load(twin, WeightPrecision::kBF16);
  CHECK(direct->head().type == kernels::WeightType::kBF16);
  const std::vector<float> want = Logits(*converted);
  CHECK(Logits(*direct) == want);
  CHECK(Logits(*as_stored) == want);
}

TEST_CASE("an INT8 tensor without its scales, or with misshapen ones, is an error naming them") {
  const std::string d = Written("int8bad", InitDType::kI8);
  RewriteTensors(d, [](const std::string& name, DType&, std::vector<int64_t>&) { return name != "layers.0.attn.wkv.scale"; });
  const std::string e1 = LoadError(d);
  CHECK(e1.find("layers.0.attn.wkv.scale") != std::string::npos);
  CHECK(e1.find("missing") != std::string::npos);
  const std::string d2 = Written("int8bad2", InitDType::kI8);
  RewriteTensors(d2, [](const std::string& name, DType&, std::vector<int64_t>& shape) {
    if (name == "head.scale") shape.back() -= 1;
    return true;
  });
  const std::string e2 = LoadError(d2);
  CHECK(e2.find("head.scale") != std::string::npos);
  CHECK(e2.find("expected BF16") != std::string::npos);
}

// Files written before session 37 hold F32 scales. Each is read as its nearest bfloat16: scales a
// little off their bfloat16s (by 2^-12 of themselves, under half a bfloat16 step) give the model
// of the bfloat16 file exactly.
TEST_CASE("an INT8 file with F32 scales loads as their nearest bfloat16s") {
  const std::string d = Written("int8f32s", InitDType::kI8);
  const std::string old = cedar::test::TempDir("initdt-int8-f32-scales");
  std::filesystem::copy_file(d + "/config.json", old + "/config.json", std::filesystem::copy_options::overwrite_existing);
  {
    SafetensorsWriter w;
    SafetensorsFile f(d + "/model.safetensors");
    int f32_scales = 0;
    for (const auto& [name, t] : f.Tensors()) {
      if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0 && t.dtype == DType::BF16) {
        std::vector<float> v(t.nbytes / 2);
        for (size_t i = 0; i < v.size(); ++i) v[i] = kernels::Bf16ToFloat(reinterpret_cast<const uint16_t*>(t.data)[i]) * (1.0f + 0x1p-12f);
        w.AddF32(name, t.shape, v.data());
        ++f32_scales;
      } else {
        w.AddRaw(name, t.dtype, t.shape, t.data, t.nbytes);
      }
    }
    REQUIRE(f32_scales > 0);
    w.Write(old + "/model.safetensors");
  }
  auto want = Load(d, WeightPrecision::kAsStored);
  auto got = Load(old, WeightPrecision::kAsStored);
  const Weight& a = got->head();
  const Weight& b = want->head();
  REQUIRE(a.type == kernels::WeightType::kI8);
  CHECK(std::memcmp(a.scales, b.scales, size_t(a.rows * ((a.cols + 31) / 32)) * 2) == 0);
  CHECK(Logits(*got) == Logits(*want));
}

// The symmetric format holds -127..127: the 8-bit- and BF16-activation kernels take a weight's
// magnitude or negate it, which -128 does not survive, so a file holding one is refused.
TEST_CASE("an INT8 weight of -128 is an error naming the tensor and the element") {
  const std::string d = Written("int8neg", InitDType::kI8);
  {
    SafetensorsWriter w;
    {
      SafetensorsFile f(d + "/model.safetensors");
      for (const auto& [name, t] : f.Tensors()) {
        std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
        if (name == "layers.1.attn.wkv.weight") {
          REQUIRE(t.dtype == DType::I8);
          bytes[size_t(t.shape.back()) * 2 + 5] = 0x80;  // row 2, column 5
        }
        w.AddRaw(name, t.dtype, t.shape, bytes.data(), bytes.size());
      }
    }
    w.Write(d + "/model.safetensors");
  }
  const std::string e = LoadError(d);
  CHECK(e.find("layers.1.attn.wkv.weight") != std::string::npos);
  CHECK(e.find("-128 at row 2, column 5") != std::string::npos);
}

TEST_CASE("--dtype names the accepted values") {
  CHECK(ParseInitDType("int8") == InitDType::kI8);
  try {
    ParseInitDType("fp8");
    FAIL("accepted fp8");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("f32, bf16 or int8") != std::string::npos);
  }
}
