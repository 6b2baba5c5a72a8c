// Engram (engine/engram.h) on a small random Engram written in the released tensor layout,
// against the float64 reference tools/reference/v41/engram.py run by /usr/bin/python3 at test
// time (its own primes, NumPy multipliers, hashing, row reads and gated update). Exits 77
// (ctest: skipped) when python3 with numpy and torch is missing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint_index.h"
#include "engine/engram.h"
#include "engine/pcg64.h"
#include "engine/safetensors.h"
#include "kernels/quant_formats.h"
#include "tests/run_capture.h"

using namespace cedar;
using nlohmann::json;
using cedar::testing::RunCapture;

namespace {

constexpr int kLayer = 3;  // the second Engram layer: its primes skip the first layer's
constexpr double kU = 1.0 / (1 << 24);  // float unit roundoff

// A small Engram: d 64, 4 streams, orders 2..4 x 2 heads of 32 (K = 6 rows, wkv in = 192),
// ~120k table rows (primes above 20000), 40 token ids in 25 classes, pad id 2.
struct Fixture {
  ModelConfig cfg;
  std::string dir;
  std::vector<int32_t> classes;
  std::vector<float> qk_max;  // [hc] max |q_weight * k_weight| after BF16 rounding
  json ref;                   // the reference's output
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> image;
  std::vector<std::vector<float>> x;  // per case [n, ResidualWidth]
};

std::vector<int32_t> Classes(int vocab, int n_classes, std::mt19937& rng) {
  std::vector<int32_t> c(static_cast<size_t>(vocab));
  for (int t = 0; t < vocab; ++t) c[size_t(t)] = t < n_classes ? t : int32_t(rng() % uint32_t(n_classes));
  std::shuffle(c.begin(), c.end(), rng);  // every class still used; ids out of order
  return c;
}

const Fixture& F() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelConfig& c = fx->cfg;
    c.vocab_size = 40;
    c.dim = 64;
    c.hc_mult = 4;
    c.norm_eps = 1e-6f;
    c.engram_layers = {1, kLayer};
    c.engram_max_ngram = 4;
    c.engram_n_heads = 2;
    c.engram_head_dim = 32;
    c.engram_vocab_size = 20000;
    c.engram_compressed_vocab = 25;
    c.engram_pad_id = 2;
    c.engram_table_rows = ComputeEngramHashConstants(c.engram_layers, 4, 2, 20000, 25).table_rows;
    std::mt19937 rng(1234);
    fx->classes = Classes(c.vocab_size, 25, rng);

    char tmpl[] = "/tmp/cedar_engram_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    fx->dir = tmpl;
    static std::string cleanup_dir;
    cleanup_dir = fx->dir;
    std::atexit([] {
      for (const char* name : {"/model.safetensors", "/spec.json"}) std::remove((cleanup_dir + name).c_str());
      ::rmdir(cleanup_dir.c_str());
    });
    const int64_t rows = c.engram_table_rows[1], hd = 32, d = c.dim, hc = c.hc_mult, in = 6 * hd;
    std::vector<uint8_t> codes(size_t(rows * hd)), scales(size_t(rows * hd / 32));
    for (auto& b : codes) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
    }
    for (auto& s : scales) s = uint8_t(117 + rng() % 5);  // 2^-10 .. 2^-6
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> wkv(size_t((hc + 1) * d * in));
    for (auto& v : wkv) v = 0.1f * g(rng);
    std::vector<uint8_t> wc(wkv.size()), ws(size_t((hc + 1) * d / 32 * (in / 32)));
    kernels::QuantFp8Blocks(wkv.data(), (hc + 1) * d, in, 32, 32, wc.data(), ws.data());
    std::vector<float> q(size_t(hc * d)), k(size_t(hc * d));
    for (auto& v : q) v = 1.0f + 0.5f * g(rng);
    for (auto& v : k) v = 1.0f + 0.5f * g(rng);
    fx->qk_max.assign(size_t(hc), 0.0f);
    for (int64_t i = 0; i < hc * d; ++i)
      fx->qk_max[size_t(i / d)] = std::max(fx->qk_max[size_t(i / d)], std::fabs(BF16ToFloat(FloatToBF16(q[size_t(i)])) *
                                                                                 BF16ToFloat(FloatToBF16(k[size_t(i)]))));
    const std::string p = "layers." + std::to_string(kLayer) + ".engram.";
    SafetensorsWriter w;
    w.AddRaw(p + "embed.weight", DType::F8_E4M3, {rows, hd}, codes.data(), codes.size());
    w.AddRaw(p + "embed.scale", DType::F8_E8M0, {rows, hd / 32}, scales.data(), scales.size());
    w.AddBF16(p + "q_weight", {hc, d}, q.data());
    w.AddBF16(p + "k_weight", {hc, d}, k.data());
    w.AddRaw(p + "wkv.weight", DType::F8_E4M3, {(hc + 1) * d, in}, wc.data(), wc.size());
    w.AddRaw(p + "wkv.scale", DType::F8_E8M0, {(hc + 1) * d / 32, in / 32}, ws.data(), ws.size());
    w.Write(fx->dir + "/model.safetensors");

    // Case 0: 30 tokens (pad id among them); case 1: the same with image tokens at 9..11.
    std::vector<int32_t> t(30);
    for (auto& v : t) v = int32_t(rng() % 40);
    t[5] = 2;
    fx->tokens = {t, t};
    fx->image = {std::vector<uint8_t>(30, 0), std::vector<uint8_t>(30, 0)};
    for (int i = 9; i <= 11; ++i) fx->image[1][size_t(i)] = 1;
    const int RW = c.ResidualWidth();
    json spec = {{"checkpoint", fx->dir}, {"layer", kLayer}, {"token_class", fx->classes}};
    spec["config"] = {{"dim", d},
                      {"hc_mult", hc},
                      {"norm_eps", double(c.norm_eps)},
                      {"engram_layers", c.engram_layers},
                      {"engram_max_ngram", 4},
                      {"engram_n_heads", 2},
                      {"engram_head_dim", 32},
                      {"engram_vocab_size", 20000},
                      {"engram_compressed_vocab", 25},
                      {"engram_pad_id", 2}};
    for (int cs = 0; cs < 2; ++cs) {
      std::vector<float> xs(size_t(30 * RW));
      for (auto& v : xs) v = g(rng);
      json xj = json::array();
      for (int r = 0; r < 30; ++r) xj.push_back(std::vector<float>(xs.begin() + r * RW, xs.begin() + r * RW + hc * d));
      json cj = {{"tokens", fx->tokens[size_t(cs)]}, {"x", xj}};
      if (cs == 1) cj["image"] = fx->image[1];
      spec["cases"].push_back(cj);
      fx->x.push_back(xs);
    }
    const std::string spec_path = fx->dir + "/spec.json";
    std::ofstream(spec_path) << spec.dump();
    const std::string out =
        RunCapture("OMP_NUM_THREADS=1 /usr/bin/python3 " + std::string(CEDAR_SOURCE_DIR) + "/tools/reference/v41/engram.py " + spec_path);
    if (out.empty() && std::system("/usr/bin/python3 -c 'import numpy, torch' >/dev/null 2>&1") != 0) {
      std::fprintf(stderr, "v41_engram_test: /usr/bin/python3 with numpy and torch not available; skipping\n");
      std::exit(77);
    }
    REQUIRE_MESSAGE(!out.empty(), "tools/reference/v41/engram.py failed on " << spec_path);
    fx->ref = json::parse(out);
    return fx;
  }();
  return *f;
}

EngramWeights Load(const EngramOptions& opt = {}) {
  const Fixture& f = F();
  Checkpoint ck(f.dir);
  return LoadEngram(ck, f.dir, f.cfg, kLayer, f.classes, opt);
}

// Bound on |C++ - float64| of one token's stream i, from the arithmetic (engram.h's equations):
//  * rows and wkv are exact in float (E4M3 x 2^k), so the only rounding before the gate is the
//    float product kv = wkv r over in = 192 terms: |dkv| <= e = 1.01 in u max_j sum_k |wkv_jk r_k|;
//  * dot = sqrt(d) <X w, key> / (|X| |key|) (eps aside; it only damps): a key error of norm
//    <= sqrt(d) e moves it by at most (sqrt(d) max|w| + |dot|) sqrt(d) e / |key| (x1.1 for second order);
//  * the signed sqrt has slope <= 1 / (2 sqrt(max(|dot| - ddot, 1e-6))), the sigmoid <= 1/4;
//    when ddot >= |dot| the sign may flip: the jump is at most 2 sqrt(max(|dot| + ddot, 1e-6));
//  * X_i + g v then adds g e + dg (|v| + e) and two float roundings of size u (|X| + |v|).
double StreamBound(const json& res, int t, int i, float qk_max, double x_max) {
  const double d = 64, e = 1.01 * 192 * kU * res["kv_abs"][size_t(t)].get<double>();
  const double dot = std::fabs(res["dot"][size_t(t)][size_t(i)].get<double>());
  const double kn = res["key_norm"][size_t(t)][size_t(i)].get<double>(), vmax = res["v_max"][size_t(t)].get<double>();
  const double ddot = 1.1 * (std::sqrt(d) * qk_max + dot) * std::sqrt(d) * e / kn;
  const double ds = ddot < dot ? ddot / (2 * std::sqrt(std::max(dot - ddot, 1e-6))) : 2 * std::sqrt(std::max(dot + ddot, 1e-6));
  const double dg = ds / 4 + kU;
  return e + dg * (vmax + e) + 2 * kU * (x_max + vmax);
}

// Runs EngramAdd over case `cs` in pieces of the given sizes (the last repeats), from position 0.
std::vector<float> RunChunks(const EngramWeights& w, int cs, std::vector<int> sizes) {
  const Fixture& f = F();
  std::vector<float> x = f.x[size_t(cs)];
  const std::vector<int32_t>& t = f.tokens[size_t(cs)];
  const int RW = f.cfg.ResidualWidth(), n = int(t.size());
  int pos = 0;
  for (size_t k = 0; pos < n; ++k) {
    const int m = std::min(sizes[std::min(k, sizes.size() - 1)], n - pos);
    const int np = std::min(pos, f.cfg.engram_max_ngram - 1);
    EngramAdd(w, f.cfg, t.data() + pos, pos, m, np ? t.data() + pos - np : nullptr, x.data() + size_t(pos) * size_t(RW));
    pos += m;
  }
  return x;
}

// Counts what the table reader reads: bytes, calls, and whether any read left the table.
struct CountingReader final : EngramFileReader {
  std::unique_ptr<EngramFileReader> inner;
  std::atomic<uint64_t>* bytes;
  std::atomic<uint64_t>* calls;
  void Read(void* dst, size_t n, uint64_t off) const override {
    *bytes += n;
    ++*calls;
    inner->Read(dst, n, off);
  }
};

}  // namespace

TEST_CASE("Engram hash constants and row ids match the float64 reference exactly") {
  const Fixture& f = F();
  const EngramWeights w = Load();
  CHECK(w.hash.primes == f.ref["primes"].get<std::vector<int64_t>>());
  CHECK(w.hash.multipliers == f.ref["multipliers"].get<std::vector<int64_t>>());
  int compared = 0;
  for (int cs = 0; cs < 2; ++cs) {
    const std::vector<int64_t> ids = EngramRowIds(w.hash, f.tokens[size_t(cs)].data(), 0, 30, nullptr, f.image[size_t(cs)].data());
    const auto want = f.ref["cases"][size_t(cs)]["row_ids"].get<std::vector<std::vector<int64_t>>>();
    REQUIRE(want.size() == 30);
    for (int t = 0; t < 30; ++t)
      for (int k = 0; k < 6; ++k) {
        CHECK_MESSAGE(ids[size_t(t * 6 + k)] == want[size_t(t)][size_t(k)], "case " << cs << " token " << t << " lookup " << k);
        ++compared;
      }
  }
  // The image case differs from the plain one exactly at the image tokens and the 3 after them.
  const auto a = f.ref["cases"][0]["row_ids"], b = f.ref["cases"][1]["row_ids"];
  for (int t = 0; t < 30; ++t) CHECK((a[size_t(t)] != b[size_t(t)]) == (t >= 9 && t <= 14));
  MESSAGE("compared " << compared << " row ids; table rows " << w.table.rows);
}

TEST_CASE("row ids with the released constants (layers 1 and 14, 16M buckets, 99,092 classes) match the reference") {
  F();  // python checked
  ModelConfig c;
  c.vocab_size = 129280;
  c.engram_layers = {1, 14};
  c.engram_max_ngram = 4;
  c.engram_n_heads = 8;
  c.engram_vocab_size = 16000000;
  c.engram_compressed_vocab = 99092;
  const EngramHashConstants k = ComputeEngramHashConstants(c.engram_layers, 4, 8, 16000000, 99092);
  CHECK(k.table_rows == std::vector<int64_t>{384006168, 384016682});  // engram_num_embeddings as released
  // A class table using the top classes (the largest products): id -> 99091 - id % 99092.
  std::vector<int32_t> cls(size_t(c.vocab_size));
  for (size_t t = 0; t < cls.size(); ++t) cls[t] = int32_t(99091 - int64_t(t) % 99092);
  std::mt19937 rng(5);
  std::vector<int32_t> toks(40);
  for (auto& t : toks) t = int32_t(rng() % 129280);
  toks[0] = 2;
  toks[7] = 0;  // class 99091: the largest class times the largest multiplier
  json spec = {{"layer", 14}, {"token_class", cls}};
  spec["config"] = {{"dim", 1}, {"hc_mult", 1}, {"norm_eps", 1e-20}, {"engram_layers", c.engram_layers}, {"engram_max_ngram", 4},
                    {"engram_n_heads", 8}, {"engram_head_dim", 256}, {"engram_vocab_size", 16000000},
                    {"engram_compressed_vocab", 99092}, {"engram_pad_id", 2}};
  spec["cases"] = json::array({{{"tokens", toks}}});
  const std::string path = F().dir + "/spec_released.json";
  std::ofstream(path) << spec.dump();
  const json ref = json::parse(RunCapture("/usr/bin/python3 " + std::string(CEDAR_SOURCE_DIR) + "/tools/reference/v41/engram.py " + path));
  std::remove(path.c_str());
  EngramHash h;
  h.max_ngram = 4;
  h.n_heads = 8;
  h.multipliers = k.multipliers[1];
  int64_t acc = 0;
  for (const auto& order : k.primes[1])
    for (int64_t p : order) h.primes.push_back(p), h.offsets.push_back(acc), acc += p;
  h.token_class = cls;
  h.pad_class = cls[2];
  CHECK(h.primes == ref["primes"].get<std::vector<int64_t>>());
  CHECK(h.multipliers == ref["multipliers"].get<std::vector<int64_t>>());
  const std::vector<int64_t> ids = EngramRowIds(h, toks.data(), 0, 40, nullptr);
  const auto want = ref["cases"][0]["row_ids"].get<std::vector<std::vector<int64_t>>>();
  for (int t = 0; t < 40; ++t)
    for (int j = 0; j < 24; ++j) CHECK_MESSAGE(ids[size_t(t * 24 + j)] == want[size_t(t)][size_t(j)], "token " << t << " lookup " << j);
  for (int64_t r : ids) CHECK((r >= 0 && r < 384016682));
}

TEST_CASE("EngramAdd matches the float64 reference within the float error bound") {
  const Fixture& f = F();
  // wkv dequantised to F32 (--weights f32), or held as released, FP8 with its 32x32 E8M0 blocks
  // (as-stored): the same values (E4M3 x 2^k is exact in float), so the same bound, whatever order
  // the FP8 product sums in.
  for (const WeightPrecision precision : {WeightPrecision::kF32, WeightPrecision::kAsStored}) {
    CAPTURE(WeightPrecisionName(precision));
    EngramOptions opt;
    opt.weights = precision;
    const EngramWeights w = Load(opt);
    CHECK(w.wkv.type == (precision == WeightPrecision::kF32 ? kernels::WeightType::kF32 : kernels::WeightType::kFP8));
    const std::vector<float> x = RunChunks(w, 0, {30});
    const json& res = f.ref["cases"][0];
    const int RW = f.cfg.ResidualWidth(), d = 64, hc = 4;
    double worst_ratio = 0, worst_err = 0, worst_change = 0;
    for (int t = 0; t < 30; ++t) {
      const auto want = res["x"][size_t(t)].get<std::vector<double>>();
      for (int i = 0; i < hc; ++i) {
        double x_max = 0;
        for (int c = 0; c < d; ++c) x_max = std::max(x_max, std::fabs(want[size_t(i * d + c)]));
        const double bound = StreamBound(res, t, i, f.qk_max[size_t(i)], x_max);
        for (int c = 0; c < d; ++c) {
          const double got = x[size_t(t * RW + i * d + c)], ref = want[size_t(i * d + c)];
          const double err = std::fabs(got - ref);
          CHECK_MESSAGE(err <= bound, "token " << t << " stream " << i << " channel " << c << ": got " << got << ", reference " << ref
                                              << ", bound " << bound);
          worst_ratio = std::max(worst_ratio, err / bound);
          worst_err = std::max(worst_err, err);
          worst_change = std::max(worst_change, std::fabs(ref - f.x[0][size_t(t * RW + i * d + c)]));
        }
      }
      for (int i = 0; i < hc; ++i) CHECK(x[size_t(t * RW + hc * d + i)] == f.x[0][size_t(t * RW + hc * d + i)]);  // pre-mix untouched
    }
    MESSAGE("worst |C++ - float64| " << worst_err << " (" << worst_ratio << " of its bound); largest update " << worst_change);
    CHECK(worst_change > 0.1);  // the update is not vanishingly small next to the bound
  }
}

TEST_CASE("chunked prefill and one-token decode equal one whole call") {
  const Fixture& f = F();
  const EngramWeights w = Load();
  // Row ids: exactly equal whatever the pieces (the look-back comes from prev, never pads).
  const std::vector<int32_t>& t = f.tokens[0];
  const std::vector<int64_t> whole = EngramRowIds(w.hash, t.data(), 0, 30, nullptr);
  for (int piece : {1, 2, 3, 7, 13}) {
    for (int pos = 0; pos < 30; pos += piece) {
      const int m = std::min(piece, 30 - pos), np = std::min(pos, 3);
      const std::vector<int64_t> ids = EngramRowIds(w.hash, t.data() + pos, pos, m, np ? t.data() + pos - np : nullptr);
      CHECK(std::equal(ids.begin(), ids.end(), whole.begin() + pos * 6));
    }
  }
  // Streams: within twice the bound (each path is within one bound of float64; the kv product
  // of a 30-row call runs on sgemm, a 1-row one on a dot product, so the last bits may differ),
  // with wkv as F32 and as released (FP8: one-row products on the typed decode kernel).
  EngramOptions as_stored;
  as_stored.weights = WeightPrecision::kAsStored;
  const EngramWeights w8 = Load(as_stored);
  const json& res = f.ref["cases"][0];
  const int RW = f.cfg.ResidualWidth();
  for (const EngramWeights* ww : {&w, &w8})
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{1}, {7, 1, 13}, {2, 5}}) {
    const std::vector<float> a = RunChunks(*ww, 0, {30}), b = RunChunks(*ww, 0, sizes);
    double worst = 0;
    for (int tk = 0; tk < 30; ++tk)
      for (int i = 0; i < 4; ++i) {
        double x_max = 0;
        for (int c = 0; c < 64; ++c) x_max = std::max(x_max, double(std::fabs(a[size_t(tk * RW + i * 64 + c)])));
        const double bound = 2 * StreamBound(res, tk, i, f.qk_max[size_t(i)], x_max);
        for (int c = 0; c < 64; ++c) {
          const double err = std::fabs(double(a[size_t(tk * RW + i * 64 + c)]) - b[size_t(tk * RW + i * 64 + c)]);
          CHECK_MESSAGE(err <= bound, "pieces " << sizes[0] << ".. token " << tk << " stream " << i);
          worst = std::max(worst, err);
        }
      }
    MESSAGE("wkv " << std::string(kernels::WeightTypeName(ww->wkv.type)) << ", pieces starting " << sizes[0] << ": worst difference from the whole call " << worst);
  }
}

TEST_CASE("a lookup reads only its rows from the file, never the table") {
  const Fixture& f = F();
  std::atomic<uint64_t> bytes{0}, calls{0};
  EngramOptions opt;
  opt.io_threads = 4;
  opt.open_reader = [&](const std::string& path) {
    auto r = std::make_unique<CountingReader>();
    r->inner = OpenPreadReader(path);
    r->bytes = &bytes;
    r->calls = &calls;
    return std::unique_ptr<EngramFileReader>(std::move(r));
  };
  const EngramWeights w = Load(opt);
  CHECK(bytes.load() == 0);  // loading reads headers and the small tensors, not the table
  std::vector<float> x = f.x[0];
  EngramAdd(w, f.cfg, f.tokens[0].data(), 0, 30, nullptr, x.data());
  const std::vector<int64_t> ids = EngramRowIds(w.hash, f.tokens[0].data(), 0, 30, nullptr);
  const std::set<int64_t> uniq(ids.begin(), ids.end());
  // One read of 32 codes and one of 1 scale per distinct row, nothing else.
  CHECK(calls.load() == 2 * uniq.size());
  CHECK(bytes.load() == uniq.size() * (32 + 1));
  const uint64_t table_bytes = uint64_t(w.table.rows) * 33;
  CHECK(bytes.load() * 500 < table_bytes);
  MESSAGE("30 tokens: " << uniq.size() << " distinct rows, " << bytes.load() << " bytes read of a " << table_bytes << "-byte table");
}

TEST_CASE("lookups from several threads at once share the IO pool and get their own rows") {
  const Fixture& f = F();
  EngramOptions opt;
  opt.io_threads = 4;
  const EngramWeights w = Load(opt);
  std::vector<std::vector<int64_t>> ids(3);
  std::vector<std::vector<float>> want(3);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 3; ++k) {
    ids[size_t(k)].resize(200);
    for (auto& r : ids[size_t(k)]) r = int64_t(rng() % uint64_t(w.table.rows));
    want[size_t(k)].resize(200 * 32);
    EngramGatherRows(w, ids[size_t(k)].data(), 200, want[size_t(k)].data());
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k)
    threads.emplace_back([&, k] {
      std::vector<float> got(200 * 32);
      for (int rep = 0; rep < 30; ++rep) {
        EngramGatherRows(w, ids[size_t(k)].data(), 200, got.data());
        if (got != want[size_t(k)]) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches.load() == 0);
  // Spot-check the dequantisation of one row against the file's bytes decoded here by hand.
  std::ifstream in(f.dir + "/model.safetensors", std::ios::binary);
  std::vector<uint8_t> code(32), scale(1);
  in.seekg(std::streamoff(w.table.weight_offset + uint64_t(ids[0][0]) * 32));
  in.read(reinterpret_cast<char*>(code.data()), 32);
  in.seekg(std::streamoff(w.table.scale_offset + uint64_t(ids[0][0])));
  in.read(reinterpret_cast<char*>(scale.data()), 1);
  for (int c = 0; c < 32; ++c) {
    const int e = (code[size_t(c)] >> 3) & 15, m = code[size_t(c)] & 7;
    const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    const double v = (code[size_t(c)] & 0x80 ? -mag : mag) * std::ldexp(1.0, int(scale[0]) - 127);
    CHECK(double(want[0][size_t(c)]) == v);
  }
}

TEST_CASE("bad Engram input is refused with a message naming what was expected") {
  const Fixture& f = F();
  Checkpoint ck(f.dir);
  std::vector<int32_t> short_table(f.classes.begin(), f.classes.end() - 1);
  CHECK_THROWS_WITH_AS(LoadEngram(ck, f.dir, f.cfg, kLayer, short_table), doctest::Contains("expected 40 entries"), std::runtime_error);
  std::vector<int32_t> merged = f.classes;
  for (auto& c : merged) c = std::min(c, 23);  // 24 classes where the config says 25
  CHECK_THROWS_WITH_AS(LoadEngram(ck, f.dir, f.cfg, kLayer, merged), doctest::Contains("expected 25 classes"), std::runtime_error);
  ModelConfig bad = f.cfg;
  bad.engram_table_rows[1] += 1;
  CHECK_THROWS_WITH_AS(LoadEngram(ck, f.dir, bad, kLayer, f.classes), doctest::Contains("engram_table_rows[1]"), std::runtime_error);
  CHECK_THROWS_AS(LoadEngram(ck, f.dir, f.cfg, 2, f.classes), std::runtime_error);  // not an Engram layer
  // 25 classes over 40 ids need the tokenizer the table is built from.
  CHECK_THROWS_WITH_AS(LoadAllEngrams(ck, f.dir, f.cfg), doctest::Contains("expected tokenizer.json"), std::runtime_error);
  const EngramWeights w = Load();
  const int32_t bad_tok[1] = {40};
  CHECK_THROWS_WITH_AS(EngramRowIds(w.hash, bad_tok, 0, 1, nullptr), doctest::Contains("expected 0..39, found 40"), std::invalid_argument);
  const int32_t ok_tok[1] = {1};
  CHECK_THROWS_WITH_AS(EngramRowIds(w.hash, ok_tok, 5, 1, nullptr), doctest::Contains("expected the 3 tokens before position 5"),
                       std::invalid_argument);
}
