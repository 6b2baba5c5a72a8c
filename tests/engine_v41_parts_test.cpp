// The released architecture's parts in the engine (issue 21), each against values computed here
// from the equations of ../shared/spec/v41-released-notes.md §2.1-2.3 (in double, written
// independently of engine/mhc.cpp, engine/rope.cpp and engine/ffn.cpp), and against the float64
// reference's component vectors (tests/golden/v41_components.json, tools/reference/v41).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/layer_parts.h"
#include "engine/mhc.h"
#include "engine/rope.h"
#include "kernels/ops.h"
#include "tests/test_models.h"

using namespace cedar;
using cedar::test::PresetModel;

namespace {

std::vector<float> Randn(size_t n, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng));
  return v;
}

double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

nlohmann::json Components() {
  std::ifstream in(std::string(CEDAR_SOURCE_DIR) + "/tests/golden/v41_components.json");
  REQUIRE(in.good());
  nlohmann::json j;
  in >> j;
  return j;
}

}  // namespace

TEST_CASE("mHC: Sinkhorn equals the float64 reference's released 20-iteration output") {
  const nlohmann::json j = Components()["sinkhorn"];
  for (const auto& cs : j["cases"]) {
    std::vector<double> m = cs["logits"].get<std::vector<double>>();
    const std::vector<double> want = cs["comb"].get<std::vector<double>>();
    HcSinkhorn(m.data(), 4, j["iters"].get<int>(), j["hc_eps"].get<double>());
    for (size_t k = 0; k < 16; ++k) CHECK(m[k] == doctest::Approx(want[k]).epsilon(1e-12));
    for (int c = 0; c < 4; ++c) {  // the last step normalises columns: sums 1 up to eps
      double s = 0;
      for (int r = 0; r < 4; ++r) s += m[size_t(r * 4 + c)];
      CHECK(std::fabs(s - 1.0) < 1e-5);
    }
  }
}

TEST_CASE("mHC: coefficients, collapse and stream update equal the equations of notes §2.1") {
  const int hc = 4, d = 16, flat = hc * d, nmix = (2 + hc) * hc, n = 3;
  ModelConfig c;
  REQUIRE(PresetConfig("tiny-hc", &c));
  c.dim = d;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6f;
  c.norm_eps = 1e-6f;
  const std::vector<float> fn = Randn(size_t(nmix) * flat, 1.0 / std::sqrt(flat), 1), base = Randn(nmix, 0.5, 2);
  const std::vector<float> scale = {0.6f, 0.4f, 0.7f};
  std::vector<float> rows(size_t(n) * (flat + hc));
  {
    const std::vector<float> x = Randn(rows.size(), 1.0, 3);
    std::copy(x.begin(), x.end(), rows.begin());
    for (int r = 0; r < n; ++r) {  // a: a positive pre-mix
      float* a = rows.data() + size_t(r) * (flat + hc) + flat;
      for (int i = 0; i < hc; ++i) a[i] = 0.2f + 0.1f * float(i + r);
    }
  }
  Weight wf{fn.data(), nmix, flat}, wb{base.data(), nmix, 1}, ws{scale.data(), 3, 1};
  HcCoeffs k;
  HcCoefficients(c, HcParams{wf, wb, ws}, rows.data(), n, &k);
  std::vector<float> y = Randn(size_t(n) * d, 1.0, 4), collapsed(size_t(n) * d), updated = rows;
  HcCollapseRows(rows.data(), n, hc, d, collapsed.data());
  HcUpdateRows(updated.data(), n, hc, d, y.data(), k);
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const float* X = rows.data() + size_t(r) * (flat + hc);
    const float* a = X + flat;
    double ss = 0;
    for (int e = 0; e < flat; ++e) ss += double(X[e]) * X[e];
    const double inv = 1.0 / std::sqrt(ss / flat + 1e-6);
    std::vector<double> mu(static_cast<size_t>(nmix));
    for (int o = 0; o < nmix; ++o) {
      double s = 0;
      for (int e = 0; e < flat; ++e) s += double(fn[size_t(o) * flat + e]) * X[e];
      mu[size_t(o)] = s * inv;
    }
    double pre[4], post[4], M[4][4];
    for (int i = 0; i < hc; ++i) {
      pre[i] = Sig(mu[size_t(i)] * scale[0] + base[size_t(i)]) + 1e-6;
      post[i] = 2 * Sig(mu[size_t(hc + i)] * scale[1] + base[size_t(hc + i)]);
    }
    for (int i = 0; i < hc; ++i) {  // softmax over each row of the logits, + eps
      double z[4], mx = -1e300, s = 0;
      for (int j = 0; j < hc; ++j) mx = std::max(mx, z[j] = mu[size_t(2 * hc + i * hc + j)] * scale[2] + base[size_t(2 * hc + i * hc + j)]);
      for (int j = 0; j < hc; ++j) s += std::exp(z[j] - mx);
      for (int j = 0; j < hc; ++j) M[i][j] = std::exp(z[j] - mx) / s + 1e-6;
    }
    for (int it = 0; it < 20; ++it) {  // columns first; then (rows, columns) 19 times
      if (it > 0)
        for (int i = 0; i < hc; ++i) {
          double s = 0;
          for (int j = 0; j < hc; ++j) s += M[i][j];
          for (int j = 0; j < hc; ++j) M[i][j] /= s + 1e-6;
        }
      for (int j = 0; j < hc; ++j) {
        double s = 0;
        for (int i = 0; i < hc; ++i) s += M[i][j];
        for (int i = 0; i < hc; ++i) M[i][j] /= s + 1e-6;
      }
    }
    for (int i = 0; i < hc; ++i) {
      CHECK(k.pre[size_t(r * hc + i)] == doctest::Approx(pre[i]).epsilon(1e-5));
      CHECK(k.post[size_t(r * hc + i)] == doctest::Approx(post[i]).epsilon(1e-5));
      for (int j = 0; j < hc; ++j) CHECK(k.comb[size_t(r * hc * hc + i * hc + j)] == doctest::Approx(M[i][j]).epsilon(1e-5));
    }
    const float* U = updated.data() + size_t(r) * (flat + hc);
    for (int e = 0; e < d; ++e) {
      double col = 0;
      for (int i = 0; i < hc; ++i) col += double(a[i]) * X[size_t(i) * d + e];
      CHECK(collapsed[size_t(r) * d + e] == doctest::Approx(col).epsilon(1e-5));
      for (int j = 0; j < hc; ++j) {  // X'_j = post_j y + sum_i comb[i, j] X_i (source i -> destination j)
        double want = post[j] * y[size_t(r) * d + e];
        for (int i = 0; i < hc; ++i) want += M[i][j] * X[size_t(i) * d + e];
        CHECK(U[size_t(j) * d + e] == doctest::Approx(want).epsilon(1e-4));
      }
    }
    for (int i = 0; i < hc; ++i) CHECK(U[flat + i] == k.pre[size_t(r * hc + i)]);  // a' = pre
  }
  // The embedding row: e in every stream, a = (1, 0, 0, 0); collapsing it gives e back.
  std::vector<float> e = Randn(size_t(d), 1.0, 5), row(size_t(flat + hc)), back(static_cast<size_t>(d));
  HcEmbedRow(e.data(), hc, d, row.data());
  CHECK(row[size_t(flat)] == 1.0f);
  CHECK(row[size_t(flat + 1)] == 0.0f);
  HcCollapseRows(row.data(), 1, hc, d, back.data());
  CHECK(back == e);
}

TEST_CASE("YaRN: the compressed layers' frequencies equal the float64 reference; ratio-0 and rope_factor 1 keep plain RoPE") {
  const nlohmann::json j = Components()["yarn"];
  const std::vector<double> want = j["compressed"].get<std::vector<double>>();
  const std::vector<double> got = YarnInvFreq(64, 160000.0, 16.0, 65536, 32.0, 1.0);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  // tiny-hc (r 8, factor 4, original 1024): the ramp from the equations, low 0, high 2.
  ModelConfig c;
  REQUIRE(PresetConfig("tiny-hc", &c));
  const double dim_fast = 8 * std::log(1024.0 / (32 * 2 * M_PI)) / (2 * std::log(160000.0));
  const double dim_slow = 8 * std::log(1024.0 / (1 * 2 * M_PI)) / (2 * std::log(160000.0));
  REQUIRE(std::max(std::floor(dim_fast), 0.0) == 0.0);
  REQUIRE(std::min(std::ceil(dim_slow), 7.0) == 2.0);
  const std::vector<double> f = YarnInvFreq(8, 160000.0, 4.0, 1024, 32.0, 1.0);
  const double factors[4] = {1.0, 0.5 / 4 + 0.5, 0.25, 0.25};  // ramp 0, 0.5, 1, 1
  for (int i = 0; i < 4; ++i) CHECK(f[size_t(i)] == doctest::Approx(std::pow(160000.0, -2.0 * i / 8) * factors[i]).epsilon(1e-14));
  CHECK_FALSE(UsesYarn(c, 0));  // ratio 0
  CHECK(UsesYarn(c, 1));
  // A rotation with the layer's table: angle p * f_i on pair i of the last r dims.
  const int64_t pos[2] = {3, 777};
  for (int layer : {0, 1}) {
    CAPTURE(layer);
    std::vector<float> x = Randn(2 * 32, 1.0, 6), y = x;
    RopeLayer(c, layer, y.data(), 2, 1, 32, pos, 1);
    const std::vector<double> fr = layer == 0 ? YarnInvFreq(8, 10000.0, 1.0, 0, 32, 1) : f;
    for (int r = 0; r < 2; ++r) {
      for (int e = 0; e < 24; ++e) CHECK(y[size_t(r * 32 + e)] == x[size_t(r * 32 + e)]);
      for (int i = 0; i < 4; ++i) {
        const double ang = double(pos[r]) * fr[size_t(i)], x0 = x[size_t(r * 32 + 24 + 2 * i)], x1 = x[size_t(r * 32 + 25 + 2 * i)];
        CHECK(y[size_t(r * 32 + 24 + 2 * i)] == doctest::Approx(x0 * std::cos(ang) - x1 * std::sin(ang)).epsilon(1e-5));
        CHECK(y[size_t(r * 32 + 25 + 2 * i)] == doctest::Approx(x0 * std::sin(ang) + x1 * std::cos(ang)).epsilon(1e-5));
      }
    }
    RopeLayer(c, layer, y.data(), 2, 1, 32, pos, -1);  // Rot(-p) undoes Rot(p)
    for (size_t e = 0; e < x.size(); ++e) CHECK(y[e] == doctest::Approx(x[e]).epsilon(1e-5));
  }
  // With rope_factor 1 every layer is the plain kernel, bit for bit.
  ModelConfig plain;
  REQUIRE(PresetConfig("tiny", &plain));
  std::vector<float> a = Randn(64, 1.0, 7), b = a;
  RopeLayer(plain, 1, a.data(), 2, 1, 32, pos, 1);
  kernels::Rope(b.data(), 2, 1, 32, 8, pos, plain.compress_rope_theta, 1);
  CHECK(a == b);
}

TEST_CASE("MoE: sqrtsoftplus, sigmoid and softmax routers, with and without norm_topk_prob, equal the equations of notes §2.3") {
  for (const char* name : {"tiny", "tiny-hc", "tiny-hc-softmax"}) {
    CAPTURE(name);
    const Model& m = PresetModel(name);
    const ModelConfig& c = m.config();
    const int d = c.dim, ne = c.n_routed_experts, k = c.experts_per_token, I = c.moe_inter_dim, n = 5, l = 2;
    const LayerWeights& w = m.layer(l);
    const std::vector<float> x = Randn(size_t(n) * d, 1.0, 8);
    std::vector<float> h(size_t(n) * d, 0.0f);
    FfnAdd(m, l, x.data(), h.data(), n);
    auto mv = [&](const Weight& W, const double* v, int in, int out) {  // W [out, in] · v
      std::vector<double> r(static_cast<size_t>(out));
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) r[size_t(o)] += double(W.data[size_t(o) * in + i]) * v[i];
      return r;
    };
    auto ffn = [&](const FfnWeights& f, const double* u) {  // W2 (SiLU(min(W1 u, L)) * clamp(W3 u, -L, L))
      std::vector<double> g = mv(f.w1, u, d, I), v = mv(f.w3, u, d, I);
      const double L = c.swiglu_limit;
      for (int i = 0; i < I; ++i) {
        const double gi = std::min(g[size_t(i)], L);
        g[size_t(i)] = gi * Sig(gi) * std::clamp(v[size_t(i)], -L, L);
      }
      return mv(f.w2, g.data(), I, d);
    };
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      std::vector<double> u(x.begin() + size_t(r) * d, x.begin() + size_t(r + 1) * d);
      std::vector<double> z = mv(w.gate, u.data(), d, ne), s(static_cast<size_t>(ne));
      double zmax = *std::max_element(z.begin(), z.end()), zsum = 0;
      for (double v : z) zsum += std::exp(v - zmax);
      for (int e = 0; e < ne; ++e) {
        const double v = z[size_t(e)];
        if (c.score_func == "sigmoid") s[size_t(e)] = Sig(v);
        else if (c.score_func == "softmax") s[size_t(e)] = std::exp(v - zmax) / zsum;
        else s[size_t(e)] = std::sqrt(std::log1p(std::exp(v)));
      }
      std::vector<int> ids(static_cast<size_t>(ne));
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
        return s[size_t(a)] + w.gate_bias.data[a] > s[size_t(b)] + w.gate_bias.data[b];
      });
      double tot = 0;
      for (int j = 0; j < k; ++j) tot += s[size_t(ids[size_t(j)])];
      std::vector<double> want = ffn(w.shared, u.data());
      for (int j = 0; j < k; ++j) {
        const int e = ids[size_t(j)];
        const double omega = c.route_scale * s[size_t(e)] / (c.norm_topk_prob ? tot : 1.0);
        const std::vector<double> ye = ffn(w.experts[size_t(e)], u.data());
        for (int i = 0; i < d; ++i) want[size_t(i)] += omega * ye[size_t(i)];
      }
      double err = 0, mag = 0;
      for (int i = 0; i < d; ++i) {
        err = std::max(err, std::fabs(h[size_t(r) * d + i] - want[size_t(i)]));
        mag = std::max(mag, std::fabs(want[size_t(i)]));
      }
      CHECK(err / mag < 1e-5);
    }
  }
}

TEST_CASE("the CUDA engine refuses the released switches it does not run, naming each field; auto falls back to the CPU") {
  ModelConfig c;
  REQUIRE(PresetConfig("tiny", &c));
  CHECK(CudaRefusal(c) == "");
  REQUIRE(PresetConfig("tiny-hc", &c));
  const std::string why = CudaRefusal(c);
  for (const char* field : {"hc_mult 4", "rope_factor", "score_func \"sigmoid\""}) CHECK(why.find(field) != std::string::npos);
  c.kv_dtype = "released";
  c.norm_topk_prob = false;
  CHECK(CudaRefusal(c).find("kv_dtype") != std::string::npos);
  CHECK(CudaRefusal(c).find("norm_topk_prob") != std::string::npos);
  const Model& m = PresetModel("tiny-hc");
  BackendOptions o;
  o.device = "cuda";
  try {
    MakeBackend(m, o);
    FAIL("--device cuda accepted a model with hc_mult 4");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("hc_mult 4") != std::string::npos);
  }
  o.device = "auto";
  CHECK(std::string(MakeBackend(m, o)->name()) == "cpu");
}
