// Safetensors as the released checkpoint uses them: the F8_E4M3 / F8_E8M0 / I8 / U8 dtypes kept
// as raw bytes, and a sharded directory read through model.safetensors.index.json.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint_index.h"
#include "engine/safetensors.h"
#include "kernels/quant_formats.h"

using namespace cedar;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("cedar_v41_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static inline int counter = 0;
};

// A safetensors file written byte by byte here (not by SafetensorsWriter): u64 header length,
// JSON header, then the data.
void WriteByHand(const std::string& path, const nlohmann::json& header, const std::vector<uint8_t>& data) {
  const std::string h = header.dump();
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(char((n >> (8 * i)) & 0xFF));
  f.write(h.data(), std::streamsize(h.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

std::string ErrorOpening(const std::string& dir) {
  try {
    Checkpoint c(dir);
    c.VerifyAll();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a hand-written file with the released dtypes reads back as raw bytes + dtype") {
  TempDir d;
  const std::string p = (d.path / "x.safetensors").string();
  std::vector<uint8_t> data;
  nlohmann::json h;
  auto add = [&](const std::string& name, const std::string& dt, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    h[name] = {{"dtype", dt}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  };
  add("w", "F8_E4M3", {2, 2}, {0x38, 0x40, 0xB8, 0x7E});
  add("w_scale", "F8_E8M0", {1, 1}, {128});
  add("packed", "I8", {1, 2}, {0x21, 0xF0});
  add("bytes", "U8", {3}, {1, 2, 3});
  add("b", "BF16", {1}, {0x80, 0x3F});           // 1.0
  add("f", "F32", {1}, {0x00, 0x00, 0x40, 0x40});  // 3.0
  WriteByHand(p, h, data);
  SafetensorsFile f(p);
  const TensorInfo* w = f.Find("w");
  REQUIRE(w);
  CHECK(w->dtype == DType::F8_E4M3);
  CHECK(w->shape == std::vector<int64_t>{2, 2});
  CHECK(w->nbytes == 4);
  CHECK(w->data[3] == 0x7E);
  CHECK(f.Find("w_scale")->dtype == DType::F8_E8M0);
  CHECK(f.Find("packed")->dtype == DType::I8);
  CHECK(f.Find("packed")->data[0] == 0x21);
  CHECK(f.Find("bytes")->dtype == DType::U8);
  CHECK(f.ReadFloats("b")[0] == 1.0f);
  CHECK(f.ReadFloats("f")[0] == 3.0f);
  CHECK_THROWS_WITH_AS(f.ReadFloats("w"), doctest::Contains("expected F32 or BF16"), std::runtime_error);
}

TEST_CASE("an unknown dtype or a byte count that disagrees with the shape is refused by name") {
  TempDir d;
  const std::string p = (d.path / "bad.safetensors").string();
  WriteByHand(p, {{"t", {{"dtype", "F4"}, {"shape", {2}}, {"data_offsets", {0, 1}}}}}, {0});
  CHECK_THROWS_WITH(SafetensorsFile{p}, doctest::Contains("unsupported dtype F4 (expected F32, BF16, I32, I64, F8_E4M3, F8_E8M0, I8 or U8)"));
  WriteByHand(p, {{"t", {{"dtype", "F8_E4M3"}, {"shape", {3}}, {"data_offsets", {0, 2}}}}}, {0, 0});
  CHECK_THROWS_WITH(SafetensorsFile{p}, doctest::Contains("tensor 't': 2 bytes do not match its shape"));
  SafetensorsWriter wr;
  const uint8_t b[3] = {1, 2, 3};
  CHECK_THROWS_AS(wr.AddRaw("x", DType::F8_E8M0, {2, 2}, b, 3), std::invalid_argument);
}

TEST_CASE("a sharded checkpoint: index -> shards, memory-mapped, verified, dequantised") {
  TempDir d;
  // Shard 1: an FP8 weight [64, 64] with 32x32 E8M0 blocks; shard 2: a packed FP4 expert [2, 64]
  // with one scale per 32 values, and a BF16 norm.
  std::vector<uint8_t> w(64 * 64), ws = {127, 128, 126, 130};
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t(0x38 + (i % 5));  // 1.0, 1.125, ..., 1.5
  std::vector<uint8_t> e(2 * 32), es = {127, 129, 125, 127};
  for (size_t i = 0; i < e.size(); ++i) e[i] = uint8_t((i % 16) | ((15 - i % 16) << 4));
  const float norm[3] = {1.0f, -2.0f, 0.5f};
  SafetensorsWriter s1, s2;
  s1.AddRaw("layers.0.attn.wkv.weight", DType::F8_E4M3, {64, 64}, w.data(), w.size());
  s1.AddRaw("layers.0.attn.wkv.scale", DType::F8_E8M0, {2, 2}, ws.data(), ws.size());
  s2.AddRaw("layers.0.ffn.experts.0.w1.weight", DType::I8, {2, 32}, e.data(), e.size());
  s2.AddRaw("layers.0.ffn.experts.0.w1.scale", DType::F8_E8M0, {2, 2}, es.data(), es.size());
  s2.AddBF16("layers.0.attn.kv_norm.weight", {3}, norm);
  s1.Write((d.path / "model-00001-of-00002.safetensors").string());
  s2.Write((d.path / "model-00002-of-00002.safetensors").string());
  nlohmann::json idx;
  idx["metadata"]["total_size"] = 64 * 64 + 4 + 64 + 4 + 6;
  idx["weight_map"] = {{"layers.0.attn.wkv.weight", "model-00001-of-00002.safetensors"},
                       {"layers.0.attn.wkv.scale", "model-00001-of-00002.safetensors"},
                       {"layers.0.ffn.experts.0.w1.weight", "model-00002-of-00002.safetensors"},
                       {"layers.0.ffn.experts.0.w1.scale", "model-00002-of-00002.safetensors"},
                       {"layers.0.attn.kv_norm.weight", "model-00002-of-00002.safetensors"}};
  std::ofstream((d.path / "model.safetensors.index.json").string()) << idx.dump(1);

  Checkpoint ck(d.path.string());
  CHECK(ck.Sharded());
  CHECK(ck.Size() == 5);
  CHECK(ck.ShardOf("layers.0.attn.kv_norm.weight") == "model-00002-of-00002.safetensors");
  CHECK(ck.Find("nope") == nullptr);
  CHECK_THROWS_WITH(ck.Get("nope"), doctest::Contains("missing tensor 'nope'"));
  CHECK(ck.VerifyAll() == 64 * 64 + 4 + 64 + 4 + 6);
  CHECK(ck.Get("layers.0.attn.wkv.weight").dtype == DType::F8_E4M3);

  // FP8: value = (1 + m/8) * 2^(scale - 127) of its 32x32 block, computed here from the bytes.
  const std::vector<float> fw = ck.DequantizeWeight("layers.0.attn.wkv.weight");
  REQUIRE(fw.size() == 64 * 64);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      const int i = r * 64 + c;
      const double v = (1.0 + (i % 5) / 8.0) * std::pow(2.0, int(ws[size_t((r / 32) * 2 + c / 32)]) - 127);
      CHECK(double(fw[size_t(i)]) == v);
    }
  // FP4: element 2k is the low nibble of byte k; one scale per 32 values along the row.
  const double fp4[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  const std::vector<float> fe = ck.DequantizeWeight("layers.0.ffn.experts.0.w1.weight");
  REQUIRE(fe.size() == 2 * 64);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 64; ++c) {
      const uint8_t byte = e[size_t(r * 32 + c / 2)];
      const int nib = c % 2 == 0 ? byte & 15 : byte >> 4;
      CHECK(double(fe[size_t(r * 64 + c)]) == fp4[nib] * std::pow(2.0, int(es[size_t(r * 2 + c / 32)]) - 127));
    }
  const std::vector<float> fn = ck.DequantizeWeight("layers.0.attn.kv_norm.weight");
  CHECK(fn == std::vector<float>{1.0f, -2.0f, 0.5f});

  // Defects in the index are named.
  nlohmann::json bad = idx;
  bad["metadata"]["total_size"] = 1;
  std::ofstream((d.path / "model.safetensors.index.json").string()) << bad.dump();
  CHECK(ErrorOpening(d.path.string()).find("metadata.total_size") != std::string::npos);
  bad = idx;
  bad["weight_map"]["layers.0.attn.wkv.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream((d.path / "model.safetensors.index.json").string()) << bad.dump();
  CHECK(ErrorOpening(d.path.string()).find("tensor 'layers.0.attn.wkv.weight' is mapped to model-00002-of-00002.safetensors") != std::string::npos);
  bad = idx;
  bad["weight_map"]["extra"] = "model-00003-of-00003.safetensors";
  std::ofstream((d.path / "model.safetensors.index.json").string()) << bad.dump();
  CHECK(ErrorOpening(d.path.string()).find("shard model-00003-of-00003.safetensors is named by the index but missing") != std::string::npos);
  bad = idx;
  bad["weight_map"]["x"] = "../evil.safetensors";
  std::ofstream((d.path / "model.safetensors.index.json").string()) << bad.dump();
  CHECK(ErrorOpening(d.path.string()).find("expected a file name in the same directory") != std::string::npos);
  bad = idx;
  bad["weight_map"].erase("layers.0.attn.wkv.scale");
  std::ofstream((d.path / "model.safetensors.index.json").string()) << bad.dump();
  Checkpoint no_scale(d.path.string());
  CHECK_THROWS_WITH(no_scale.DequantizeWeight("layers.0.attn.wkv.weight"), doctest::Contains("needs its scale 'layers.0.attn.wkv.scale'"));
}

TEST_CASE("a single model.safetensors without an index") {
  TempDir d;
  SafetensorsWriter w;
  const float v[2] = {1.0f, 2.0f};
  w.AddF32("norm.weight", {2}, v);
  w.Write((d.path / "model.safetensors").string());
  Checkpoint ck(d.path.string());
  CHECK_FALSE(ck.Sharded());
  CHECK(ck.Names() == std::vector<std::string>{"norm.weight"});
  CHECK(ck.DequantizeWeight("norm.weight") == std::vector<float>{1.0f, 2.0f});
  TempDir empty;
  CHECK(ErrorOpening(empty.path.string()).find("expected model.safetensors.index.json or model.safetensors") != std::string::npos);
}

TEST_CASE("dequantising on the thread pool: ragged FP8 blocks, FP4 rows and large BF16 / F32 tensors split over threads") {
  // FP8 [100, 72] with a [4, 3] scale grid (25 x 24 blocks: not 32, not powers of two), FP4 [40, 64]
  // (rows split over the threads), BF16 and F32 tensors of 2.5M values (parts of 1M values):
  // every value against the bytes decoded one by one here.
  TempDir d;
  std::vector<uint8_t> w(100 * 72), ws(4 * 3), e(40 * 32), es(40 * 2);
  uint32_t h = 12345;
  auto next = [&] { return h = h * 1103515245u + 12345u, uint8_t(h >> 16); };
  for (auto& b : w) b = next();
  for (auto& b : ws) b = uint8_t(120 + next() % 12);
  for (auto& b : e) b = next();
  for (auto& b : es) b = uint8_t(120 + next() % 12);
  const size_t n = 2500000;
  std::vector<float> big(n);
  for (size_t i = 0; i < n; ++i) big[i] = float(int(i % 256) - 128) * 0.5f;  // 8 significant bits: exact in BF16
  SafetensorsWriter s;
  s.AddRaw("a.weight", DType::F8_E4M3, {100, 72}, w.data(), w.size());
  s.AddRaw("a.scale", DType::F8_E8M0, {4, 3}, ws.data(), ws.size());
  s.AddRaw("b.weight", DType::I8, {40, 32}, e.data(), e.size());
  s.AddRaw("b.scale", DType::F8_E8M0, {40, 2}, es.data(), es.size());
  s.AddBF16("c.weight", {int64_t(n)}, big.data());
  s.AddF32("d.weight", {int64_t(n)}, big.data());
  s.Write((d.path / "model.safetensors").string());
  Checkpoint ck(d.path.string());
  auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  const std::vector<float> fa = ck.DequantizeWeight("a.weight");
  REQUIRE(fa.size() == w.size());
  int bad = 0;
  for (int r = 0; r < 100; ++r)
    for (int c = 0; c < 72; ++c) {
      const float want = kernels::DecodeE4M3(w[size_t(r * 72 + c)]) * kernels::DecodeE8M0(ws[size_t((r / 25) * 3 + c / 24)]);
      bad += !same(fa[size_t(r * 72 + c)], want);
    }
  CHECK(bad == 0);
  const std::vector<float> fb = ck.DequantizeWeight("b.weight");
  REQUIRE(fb.size() == 40 * 64);
  bad = 0;
  for (int r = 0; r < 40; ++r)
    for (int c = 0; c < 64; ++c) {
      const uint8_t byte = e[size_t(r * 32 + c / 2)];
      const float want = kernels::DecodeE2M1(c % 2 == 0 ? byte & 15 : byte >> 4) * kernels::DecodeE8M0(es[size_t(r * 2 + c / 32)]);
      bad += !same(fb[size_t(r * 64 + c)], want);
    }
  CHECK(bad == 0);
  CHECK(ck.DequantizeWeight("c.weight") == big);
  CHECK(ck.DequantizeWeight("d.weight") == big);
  SafetensorsFile f((d.path / "model.safetensors").string());
  CHECK(f.ReadFloats("c.weight") == big);
  CHECK(f.ReadFloats("d.weight") == big);
}

TEST_CASE("FloatsView: an aligned F32 tensor in place, a BF16 or misaligned F32 one copied, a missing one refused") {
  TempDir d;
  const float v[5] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f};  // exact in BF16
  SafetensorsWriter s;
  s.AddF32("a", {5}, v);   // bytes 0-19 of the data: aligned (the header is padded to 8)
  s.AddBF16("b", {5}, v);  // 20-29
  s.AddF32("c", {5}, v);   // 30-49: not 4-byte aligned
  s.Write((d.path / "m.safetensors").string());
  SafetensorsFile f((d.path / "m.safetensors").string());
  const std::vector<float> want(v, v + 5);
  std::vector<float> scratch;
  const std::span<const float> av = f.FloatsView("a", scratch);
  REQUIRE(reinterpret_cast<uintptr_t>(f.Find("a")->data) % alignof(float) == 0);
  CHECK(av.data() == reinterpret_cast<const float*>(f.Find("a")->data));  // in place: no copy
  CHECK(scratch.empty());
  CHECK(std::vector<float>(av.begin(), av.end()) == want);
  for (const char* name : {"b", "c"}) {
    const std::span<const float> cv = f.FloatsView(name, scratch);
    CHECK(cv.data() == scratch.data());
    CHECK(std::vector<float>(cv.begin(), cv.end()) == want);
  }
  REQUIRE(reinterpret_cast<uintptr_t>(f.Find("c")->data) % alignof(float) != 0);
  CHECK_THROWS_WITH(f.FloatsView("nope", scratch), doctest::Contains("missing tensor 'nope'"));
}
