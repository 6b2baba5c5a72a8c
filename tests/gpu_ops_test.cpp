// CUDA kernels against the scalar references (kernels/reference_ops.cpp), part 1: cuBLAS
// products, conversion, RMSNorm, RoPE, SwiGLU and the compressor. The shapes sweep those of
// tests/kernels_test.cpp plus model-sized ones; every output starts poisoned (NaN); the
// tolerance is the dtype's epsilon times the op's growth (gpu_test_util.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "tests/gpu_test_util.h"

namespace ref = cedar::kernels::ref;
using namespace gpu_test;

namespace {

struct MatmulTypes {
  DType x, w, y;
};
const MatmulTypes kMatmulTypes[] = {{DType::kF32, DType::kF32, DType::kF32},
                                    {DType::kF32, DType::kBF16, DType::kF32},
                                    {DType::kBF16, DType::kBF16, DType::kF32},
                                    {DType::kBF16, DType::kBF16, DType::kBF16}};

// Tolerance of a product over `in` terms: F32 accumulation; F32 activations rounded to BF16
// (the reference keeps them F32); the rounding of a BF16 output.
double MatmulTol(const MatmulTypes& t, int in) {
  const double root = std::sqrt(double(std::max(in, 1)));
  double tol = Eps(DType::kF32) * 16 * root + StoreEps(t.y);
  if (t.w == DType::kBF16 && t.x == DType::kF32) tol += Eps(DType::kBF16) * 2 * root;
  return tol;
}

std::string Shape(const char* op, std::initializer_list<std::pair<const char*, long long>> kv) {
  std::string s = op;
  for (auto& [k, v] : kv) s += std::string(" ") + k + "=" + std::to_string(v);
  return s;
}

}  // namespace

TEST_CASE("Matmul (cuBLAS) matches ref::Matmul and ref::MatmulAccumulate for every dtype combination") {
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  for (const MatmulTypes& t : kMatmulTypes)
    for (int n : {0, 1, 2, 5, 17, 33})
      for (int in : {0, 1, 3, 16, 31, 130})
        for (int out : {1, 2, 9, 64, 65})
          for (float beta : {0.0f, 1.0f}) {
            const auto x = RoundTo(Random(size_t(n) * in, 1 + n), t.x);
            const auto w = RoundTo(Random(size_t(out) * in, 2 + out), t.w);
            auto want = RoundTo(std::vector<float>(size_t(n) * out, 0.25f), t.y);
            Dev dx = Upload(x, t.x), dw = Upload(w, t.w);
            Dev dy = beta == 0.0f ? Poisoned(want.size(), t.y) : Upload(want, t.y);
            GPU_REQUIRE_OK(cu::Matmul(blas, dx.p(), t.x, dw.p(), t.w, dy.p(), t.y, n, in, out, beta, nullptr));
            if (beta == 0.0f) ref::Matmul(x.data(), w.data(), want.data(), n, in, out);
            else ref::MatmulAccumulate(x.data(), w.data(), want.data(), n, in, out);
            ExpectClose(Shape("Matmul", {{"n", n}, {"in", in}, {"out", out}, {"beta", int(beta)}}) + " x=" + Str(t.x) +
                            " w=" + Str(t.w) + " y=" + Str(t.y),
                        Download(dy), want, MatmulTol(t, in));
          }
}

TEST_CASE("Matmul at a model size: BF16 weights [1024, 5120] times F32 activations") {
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  const int n = 7, in = 5120, out = 1024;
  const MatmulTypes t{DType::kF32, DType::kBF16, DType::kF32};
  const auto x = Random(size_t(n) * in, 3), w = RoundTo(Random(size_t(out) * in, 4, 0.02f), DType::kBF16);
  Dev dx = Upload(x, t.x), dw = Upload(w, t.w), dy = Poisoned(size_t(n) * out, t.y);
  GPU_REQUIRE_OK(cu::Matmul(blas, dx.p(), t.x, dw.p(), t.w, dy.p(), t.y, n, in, out, 0.0f, nullptr));
  std::vector<float> want(size_t(n) * out);
  ref::Matmul(x.data(), w.data(), want.data(), n, in, out);
  ExpectClose("Matmul 7x5120x1024", Download(dy), want, MatmulTol(t, in) * 0.02 * 4);
}

TEST_CASE("GroupedMatmul matches ref::Matmul per group (the grouped output projection)") {
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  for (const MatmulTypes& t : kMatmulTypes)
    for (int n : {1, 5, 33})
      for (int groups : {1, 3, 8})
        for (int in : {16, 130})
          for (int out : {9, 64}) {
            const auto x = RoundTo(Random(size_t(n) * groups * in, 5 + n), t.x);
            const auto w = RoundTo(Random(size_t(groups) * out * in, 6 + groups), t.w);
            Dev dx = Upload(x, t.x), dw = Upload(w, t.w), dy = Poisoned(size_t(n) * groups * out, t.y);
            GPU_REQUIRE_OK(cu::GroupedMatmul(blas, dx.p(), t.x, dw.p(), t.w, dy.p(), t.y, n, groups, in, out, 0.0f, nullptr));
            std::vector<float> want(size_t(n) * groups * out), xg(size_t(n) * in), yg(size_t(n) * out);
            for (int g = 0; g < groups; ++g) {
              for (int r = 0; r < n; ++r)
                std::copy_n(x.begin() + (size_t(r) * groups + g) * in, in, xg.begin() + size_t(r) * in);
              ref::Matmul(xg.data(), w.data() + size_t(g) * out * in, yg.data(), n, in, out);
              for (int r = 0; r < n; ++r)
                std::copy_n(yg.begin() + size_t(r) * out, out, want.begin() + (size_t(r) * groups + g) * out);
            }
            ExpectClose(Shape("GroupedMatmul", {{"n", n}, {"groups", groups}, {"in", in}, {"out", out}}) + " x=" +
                            Str(t.x) + " w=" + Str(t.w) + " y=" + Str(t.y),
                        Download(dy), want, MatmulTol(t, in));
          }
}

TEST_CASE("Convert rounds F32 to BF16 to nearest even exactly like the host, and back exactly") {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 3.0e38f, 1e-40f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  const auto r = Random(1000, 9, 100.0f);
  v.insert(v.end(), r.begin(), r.end());
  Dev src = Upload(v, DType::kF32), bf = Poisoned(v.size(), DType::kBF16), back = Poisoned(v.size(), DType::kF32);
  GPU_REQUIRE_OK(cu::Convert(src.p(), DType::kF32, bf.p(), DType::kBF16, int64_t(v.size()), nullptr));
  GPU_REQUIRE_OK(cu::Convert(bf.p(), DType::kBF16, back.p(), DType::kF32, int64_t(v.size()), nullptr));
  const auto got = Download(back);
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = cu::FloatFromBf16(cu::Bf16FromFloat(v[i]));
    INFO("element " << i << ": " << v[i] << " -> " << got[i] << ", host " << want);
    if (std::isnan(want)) CHECK(std::isnan(got[i]));
    else CHECK(std::memcmp(&got[i], &want, 4) == 0);
  }
}

TEST_CASE("RmsNorm matches ref::RmsNorm for every size and dtype, in place too") {
  const MatmulTypes kTypes[] = {{DType::kF32, DType::kF32, DType::kF32},
                                {DType::kBF16, DType::kBF16, DType::kBF16},
                                {DType::kBF16, DType::kBF16, DType::kF32},
                                {DType::kF32, DType::kBF16, DType::kF32}};  // (x, weight, y)
  std::vector<int> dims(std::begin(kSizes), std::end(kSizes));
  dims.insert(dims.end(), {512, 1280, 5120});
  for (const MatmulTypes& t : kTypes)
    for (int dim : dims) {
      const int n = 3;
      const auto x = RoundTo(Random(size_t(n) * dim, 10 + dim, 3.0f), t.x);
      const auto w = RoundTo(Random(size_t(std::max(dim, 1)), 11 + dim), t.w);
      std::vector<float> want(x.size());
      ref::RmsNorm(x.data(), w.data(), want.data(), n, dim, 1e-6f);
      const double tol = Eps(DType::kF32) * 8 * (1 + std::sqrt(double(dim))) + StoreEps(t.y);
      Dev dx = Upload(x, t.x), dw = Upload(w, t.w), dy = Poisoned(x.size(), t.y);
      GPU_REQUIRE_OK(cu::RmsNorm(dx.p(), t.x, dw.p(), t.w, dy.p(), t.y, n, dim, 1e-6f, nullptr));
      const std::string what = Shape("RmsNorm", {{"dim", dim}}) + " x=" + Str(t.x) + " w=" + Str(t.w) + " y=" + Str(t.y);
      ExpectClose(what, Download(dy), want, tol);
      if (t.x == t.y) {
        GPU_REQUIRE_OK(cu::RmsNorm(dx.p(), t.x, dw.p(), t.w, dx.p(), t.x, n, dim, 1e-6f, nullptr));
        ExpectClose(what + " in place", Download(dx), want, tol);
      }
    }
}

TEST_CASE("Rope matches ref::Rope with explicit and affine positions, and its inverse undoes it") {
  for (DType t : {DType::kF32, DType::kBF16})
    for (int rows : {0, 1, 3, 9})
      for (int rope : {0, 2, 8, 16}) {
        const int dim = 32, vecs = 3;
        const auto x = RoundTo(Random(size_t(rows) * vecs * dim, 30 + rows + rope), t);
        std::vector<int64_t> pos(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) pos[size_t(r)] = int64_t(r) * 977 + 3;  // large positions too
        auto want = x;
        ref::Rope(want.data(), rows, vecs, dim, rope, pos.data(), 160000.0f, 1);
        const double tol = Eps(DType::kF32) * 64 + StoreEps(t);
        const std::string what = Shape("Rope", {{"rows", rows}, {"rope", rope}}) + " " + Str(t);
        Dev dx = Upload(x, t), dpos = UploadRaw(pos);
        GPU_REQUIRE_OK(cu::Rope(dx.p(), t, rows, vecs, dim, rope, dpos.buf.as<int64_t>(), 0, 0, 160000.0f, 1, nullptr));
        ExpectClose(what, Download(dx), want, tol);
        GPU_REQUIRE_OK(cu::Rope(dx.p(), t, rows, vecs, dim, rope, dpos.buf.as<int64_t>(), 0, 0, 160000.0f, -1, nullptr));
        ExpectClose(what + " inverse", Download(dx), x, 2 * tol);
        Dev da = Upload(x, t);  // positions 3, 980, ... as pos_first + r · pos_step
        GPU_REQUIRE_OK(cu::Rope(da.p(), t, rows, vecs, dim, rope, nullptr, 3, 977, 160000.0f, 1, nullptr));
        ExpectClose(what + " affine positions", Download(da), want, tol);
      }
  // Model size: 64 query heads of 512 with 64 RoPE dims at positions near one million.
  const int rows = 5, vecs = 64, dim = 512, rope = 64;
  const auto x = Random(size_t(rows) * vecs * dim, 39);
  std::vector<int64_t> pos = {0, 1, 131071, 999999, 1048575};
  auto want = x;
  ref::Rope(want.data(), rows, vecs, dim, rope, pos.data(), 10000.0f, 1);
  Dev dx = Upload(x, DType::kF32), dpos = UploadRaw(pos);
  GPU_REQUIRE_OK(cu::Rope(dx.p(), DType::kF32, rows, vecs, dim, rope, dpos.buf.as<int64_t>(), 0, 0, 10000.0f, 1, nullptr));
  ExpectClose("Rope 64 heads near position 1M", Download(dx), want, Eps(DType::kF32) * 64);
}

TEST_CASE("SwiGLU matches ref::SwiGLU with and without the clamp, contiguous and as halves of one product") {
  std::vector<int> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.push_back(2304);
  for (DType in : {DType::kF32, DType::kBF16})
    for (DType out : {DType::kF32, DType::kBF16})
      for (int n : sizes)
        for (float limit : {0.0f, 10.0f, 2.5f}) {
          const int rows = 2;
          const auto g = RoundTo(Random(size_t(rows) * n, 20 + n, 8.0f), in);
          const auto u = RoundTo(Random(size_t(rows) * n, 21 + n, 8.0f), in);
          std::vector<float> want(size_t(rows) * n);
          ref::SwiGLU(g.data(), u.data(), want.data(), rows * n, limit);
          const double tol = Eps(DType::kF32) * 16 + StoreEps(out);
          const std::string what = Shape("SwiGLU", {{"n", n}}) + " limit=" + std::to_string(limit) + " in=" + Str(in) +
                                   " out=" + Str(out);
          Dev dg = Upload(g, in), du = Upload(u, in), dout = Poisoned(want.size(), out);
          GPU_REQUIRE_OK(cu::SwiGLU(dg.p(), du.p(), in, dout.p(), out, rows, n, n, n, limit, nullptr));
          ExpectClose(what, Download(dout), want, tol);
          // g and u as the halves of one [rows, 2n] product, out with its own stride.
          std::vector<float> gu(size_t(rows) * 2 * n);
          for (int r = 0; r < rows; ++r) {
            std::copy_n(g.begin() + size_t(r) * n, n, gu.begin() + size_t(r) * 2 * n);
            std::copy_n(u.begin() + size_t(r) * n, n, gu.begin() + size_t(r) * 2 * n + n);
          }
          Dev dgu = Upload(gu, in), dout2 = Poisoned(size_t(rows) * (n + 1), out);
          const size_t half = size_t(n) * cu::SizeOf(in);
          GPU_REQUIRE_OK(cu::SwiGLU(dgu.p(), static_cast<char*>(dgu.p()) + half, in, dout2.p(), out, rows, n, 2 * n,
                                    n + 1, limit, nullptr));
          auto got2 = Download(dout2);
          std::vector<float> strided;
          for (int r = 0; r < rows; ++r) strided.insert(strided.end(), got2.begin() + size_t(r) * (n + 1), got2.begin() + size_t(r) * (n + 1) + n);
          ExpectClose(what + " strided", strided, want, tol);
        }
}

TEST_CASE("CompressPairs equals the engine's softmax-pair combine then ref::RmsNorm; CompressSingle is RmsNorm") {
  for (DType in : {DType::kF32, DType::kBF16})
    for (DType out : {DType::kF32, DType::kBF16})
      for (int groups : {0, 1, 3, 17})
        for (int dim : {1, 8, 33, 512}) {
          const auto c = RoundTo(Random(size_t(2) * groups * dim, 60 + dim), in);
          const auto z = RoundTo(Random(size_t(2) * groups * dim, 61 + groups, 4.0f), in);
          const auto w = RoundTo(Random(size_t(dim), 62), DType::kBF16);
          // engine/compressor.cpp: per channel softmax over the group's two Z, then RMSNorm_c.
          std::vector<float> comb(size_t(groups) * dim), want(comb.size());
          for (int j = 0; j < groups; ++j)
            for (int i = 0; i < dim; ++i) {
              const double z0 = z[(2 * size_t(j)) * dim + i], z1 = z[(2 * size_t(j) + 1) * dim + i];
              const double mz = std::max(z0, z1), e0 = std::exp(z0 - mz), e1 = std::exp(z1 - mz);
              comb[size_t(j) * dim + i] =
                  float((e0 * c[(2 * size_t(j)) * dim + i] + e1 * c[(2 * size_t(j) + 1) * dim + i]) / (e0 + e1));
            }
          ref::RmsNorm(comb.data(), w.data(), want.data(), groups, dim, 1e-6f);
          const double tol = Eps(DType::kF32) * (16 + 8 * (1 + std::sqrt(double(dim)))) + StoreEps(out);
          Dev dc = Upload(c, in), dz = Upload(z, in), dw = Upload(w, DType::kBF16), dout = Poisoned(want.size(), out);
          GPU_REQUIRE_OK(cu::CompressPairs(dc.p(), dz.p(), in, dw.p(), DType::kBF16, dout.p(), out, groups, dim, 1e-6f, nullptr));
          ExpectClose(Shape("CompressPairs", {{"groups", groups}, {"dim", dim}}) + " in=" + Str(in) + " out=" + Str(out),
                      Download(dout), want, tol);

          std::vector<float> want1(c.size());
          ref::RmsNorm(c.data(), w.data(), want1.data(), 2 * groups, dim, 1e-6f);
          Dev d1 = Poisoned(c.size(), out);
          GPU_REQUIRE_OK(cu::CompressSingle(dc.p(), in, dw.p(), DType::kBF16, d1.p(), out, 2 * groups, dim, 1e-6f, nullptr));
          ExpectClose(Shape("CompressSingle", {{"rows", 2 * groups}, {"dim", dim}}), Download(d1), want1,
                      Eps(DType::kF32) * 8 * (1 + std::sqrt(double(dim))) + StoreEps(out));
        }
}
