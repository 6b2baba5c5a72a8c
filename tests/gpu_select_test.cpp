// CUDA kernels against the scalar references, part 2: the indexer's scores, top-k and
// candidate blocks. Selections must equal the reference exactly (same indices, same order).
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "tests/gpu_test_util.h"

namespace ref = cedar::kernels::ref;
using namespace gpu_test;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// engine/indexer.cpp's ChooseBlocks, over the reference TopK.
std::vector<int32_t> ChooseBlocks(const float* scores, int64_t n_vis, int bs, int keep) {
  const int64_t n_blocks = (n_vis + bs - 1) / bs;
  std::vector<int32_t> kept;
  if (n_blocks <= keep) {
    for (int64_t b = 0; b < n_blocks; ++b) kept.push_back(int32_t(b));
    return kept;
  }
  std::vector<float> block_max(size_t(n_blocks - 1), kNegInf);
  for (int64_t b = 0; b + 1 < n_blocks; ++b)
    for (int64_t j = b * bs; j < (b + 1) * bs; ++j) block_max[size_t(b)] = std::max(block_max[size_t(b)], scores[j]);
  std::vector<int32_t> best(static_cast<size_t>(keep));
  best.resize(size_t(ref::TopK(block_max.data(), int(n_blocks - 1), keep - 1, best.data())));
  kept = best;
  kept.push_back(int32_t(n_blocks - 1));
  return kept;
}

// Scores with many ties (a few distinct values) and some -inf.
std::vector<float> TiedScores(size_t n, uint64_t seed, int distinct, int neg_inf_every) {
  std::mt19937_64 rng(seed);
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) {
    s[i] = float(int(rng() % uint64_t(distinct)) - distinct / 2) * 0.5f;
    if (neg_inf_every > 0 && rng() % uint64_t(neg_inf_every) == 0) s[i] = kNegInf;
  }
  return s;
}

// Runs the GPU TopK on rows of `scores` ([rows, ld]) with per-row lengths and compares every
// row with ref::TopK over its first lengths[r] entries.
void CheckTopK(const std::string& what, const std::vector<float>& scores, int rows, int ld,
               const std::vector<int32_t>& lengths, int k) {
  Dev ds = Upload(scores, DType::kF32), dl = UploadRaw(lengths);
  const int ld_out = std::max(k, 1);
  Dev dout = UploadRaw(std::vector<int32_t>(size_t(rows) * ld_out, -7)), dc = UploadRaw(std::vector<int32_t>(size_t(rows), -7));
  GPU_REQUIRE_OK(cu::TopK(ds.f32(), ld, dl.i32(), rows, ld, k, dout.i32(), ld_out, dc.i32(), nullptr));
  const auto out = DownloadRaw<int32_t>(dout, size_t(rows) * ld_out);
  const auto counts = DownloadRaw<int32_t>(dc, size_t(rows));
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> want(size_t(std::max(k, 1)));
    want.resize(size_t(ref::TopK(scores.data() + size_t(r) * ld, lengths[size_t(r)], k, want.data())));
    INFO(what << " row " << r << " length " << lengths[size_t(r)] << " k " << k);
    REQUIRE(counts[size_t(r)] == int(want.size()));
    std::vector<int32_t> got(out.begin() + size_t(r) * ld_out, out.begin() + size_t(r) * ld_out + counts[size_t(r)]);
    if (got != want) {
      size_t i = 0;
      while (got[i] == want[i]) ++i;
      INFO("first difference at output " << i << ": got index " << got[i] << " expected " << want[i]);
      CHECK(got == want);
    }
  }
}

}  // namespace

TEST_CASE("IndexScores matches ref::IndexScores, in chunks and with a row stride") {
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  for (DType t : {DType::kF32, DType::kBF16})
    for (int rows : {0, 1, 4, 13})
      for (int keys : {0, 1, 9, 100})
        for (int hd : {1, 8, 20})
          for (size_t limit : {size_t(256) << 20, size_t(13 * 3 * 4 * 7)}) {  // one chunk; chunks of 7 keys
            const int heads = 3;
            const auto q = RoundTo(Random(size_t(rows) * heads * hd, 50 + rows), t);
            const auto w = Random(size_t(rows) * heads, 51);
            const auto kv = RoundTo(Random(size_t(keys) * hd, 52 + keys), t);
            std::vector<float> want(size_t(rows) * keys);
            ref::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, want.data());
            const int ld = keys + 3;
            Dev dq = Upload(q, t), dw = Upload(w, DType::kF32), dk = Upload(kv, t), ds = Poisoned(size_t(rows) * ld, DType::kF32);
            cu::IndexScoresArgs a;
            a.q = dq.p(), a.keys = dk.p(), a.type = t, a.w = dw.f32(), a.scores = ds.f32();
            a.n_rows = rows, a.n_heads = heads, a.head_dim = hd, a.n_keys = keys, a.ld_scores = ld;
            a.scratch_limit_bytes = limit;
            GPU_REQUIRE_OK(cu::IndexScores(blas, a, nullptr));
            const auto all = Download(ds);
            std::vector<float> got;
            for (int r = 0; r < rows; ++r) got.insert(got.end(), all.begin() + size_t(r) * ld, all.begin() + size_t(r) * ld + keys);
            ExpectClose("IndexScores rows=" + std::to_string(rows) + " keys=" + std::to_string(keys) + " hd=" +
                            std::to_string(hd) + " " + Str(t) + " scratch=" + std::to_string(limit),
                        got, want, Eps(DType::kF32) * 16 * heads * (1 + std::sqrt(double(hd))) * 4);
          }
}

TEST_CASE("IndexScores at the indexer's size: 32 heads of 128 against 3000 BF16 keys") {
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  const int rows = 5, heads = 32, hd = 128, keys = 3000;
  const auto q = RoundTo(Random(size_t(rows) * heads * hd, 53), DType::kBF16);
  const auto kv = RoundTo(Random(size_t(keys) * hd, 54), DType::kBF16);
  auto w = Random(size_t(rows) * heads, 55);
  for (float& x : w) x /= std::sqrt(float(hd * heads));
  std::vector<float> want(size_t(rows) * keys);
  ref::IndexScores(q.data(), w.data(), kv.data(), rows, heads, hd, keys, want.data());
  Dev dq = Upload(q, DType::kBF16), dw = Upload(w, DType::kF32), dk = Upload(kv, DType::kBF16), ds = Poisoned(want.size(), DType::kF32);
  cu::IndexScoresArgs a;
  a.q = dq.p(), a.keys = dk.p(), a.type = DType::kBF16, a.w = dw.f32(), a.scores = ds.f32();
  a.n_rows = rows, a.n_heads = heads, a.head_dim = hd, a.n_keys = keys;
  GPU_REQUIRE_OK(cu::IndexScores(blas, a, nullptr));
  ExpectClose("IndexScores 5x32x128 x 3000", Download(ds), want, Eps(DType::kF32) * 16 * (1 + std::sqrt(double(hd))) * 4);
}

TEST_CASE("TopK matches ref::TopK: ties toward the lower index, -inf never chosen, ascending output") {
  int case_no = 0;
  for (int n : kSizes)
    for (int k : {0, 1, 3, 8, 200}) {
      auto s = TiedScores(size_t(n), 7 + case_no++, 5, 0);
      if (n > 3) s[2] = kNegInf;
      CheckTopK("n=" + std::to_string(n), s, 1, n, {n}, k);
    }
  // A batch: rows of different visible lengths inside one [rows, ld] buffer, an all -inf row.
  const int rows = 6, ld = 3000;
  auto s = TiedScores(size_t(rows) * ld, 70, 40, 9);
  std::fill(s.begin() + 4 * ld, s.begin() + 5 * ld, kNegInf);
  for (int k : {1, 64, 512, 2999, 3000})
    CheckTopK("batch", s, rows, ld, {3000, 0, 1, 1234, 3000, 2048}, k);
}

TEST_CASE("TopK on long rows: k = 512 of 2^20 entries with ties, and k = 2047 of 200000") {
  const int rows = 3, n = 1 << 20;
  auto s = TiedScores(size_t(rows) * n, 71, 1 << 12, 17);
  CheckTopK("1M", s, rows, n, {n, n - 5, 700001}, 512);
  auto r = Random(200000, 72);
  CheckTopK("200000", r, 1, 200000, {200000}, 2047);
  std::vector<float> all_equal(100000, 1.5f);
  CheckTopK("all equal", all_equal, 1, 100000, {100000}, 512);
}

TEST_CASE("CandidateBlocks equals the engine's ChooseBlocks; MaskToCandidateBlocks equals its masking") {
  const std::vector<int32_t> n_vis = {0, 1, 7, 8, 9, 64, 100, 1000, 5003, 20000};
  const int rows = int(n_vis.size()), ld = 20000, bs = 8;
  for (int keep : {1, 2, 16, 64, 2048}) {
    auto s = TiedScores(size_t(rows) * ld, 80 + keep, 64, 0);
    Dev ds = Upload(s, DType::kF32), dl = UploadRaw(n_vis);
    Dev ws;
    GPU_REQUIRE_OK(ws.buf.Allocate(cu::CandidateBlocksWorkspaceBytes(rows, ld, bs)));
    Dev dout = UploadRaw(std::vector<int32_t>(size_t(rows) * keep, -7)), dc = UploadRaw(std::vector<int32_t>(size_t(rows), -7));
    GPU_REQUIRE_OK(cu::CandidateBlocks(ds.f32(), ld, dl.i32(), rows, ld, bs, keep, ws.p(), dout.i32(), keep, dc.i32(), nullptr));
    const auto out = DownloadRaw<int32_t>(dout, size_t(rows) * keep);
    const auto counts = DownloadRaw<int32_t>(dc, size_t(rows));
    std::vector<float> masked = s;
    for (int r = 0; r < rows; ++r) {
      const auto want = ChooseBlocks(s.data() + size_t(r) * ld, n_vis[size_t(r)], bs, keep);
      INFO("CandidateBlocks keep=" << keep << " row " << r << " n_vis " << n_vis[size_t(r)]);
      REQUIRE(counts[size_t(r)] == int(want.size()));
      CHECK(std::vector<int32_t>(out.begin() + size_t(r) * keep, out.begin() + size_t(r) * keep + counts[size_t(r)]) == want);
      // engine/indexer.cpp: restrict to the kept blocks when fewer than all are kept.
      const int64_t n_blocks = (n_vis[size_t(r)] + bs - 1) / bs;
      if (int64_t(want.size()) < n_blocks) {
        std::vector<char> kept(size_t(n_blocks), 0);
        for (int32_t b : want) kept[size_t(b)] = 1;
        for (int64_t j = 0; j < n_vis[size_t(r)]; ++j)
          if (!kept[size_t(j / bs)]) masked[size_t(r) * ld + size_t(j)] = kNegInf;
      }
    }
    GPU_REQUIRE_OK(cu::MaskToCandidateBlocks(ds.f32(), ld, dl.i32(), rows, ld, dout.i32(), keep, dc.i32(), bs, nullptr));
    const auto got = Download(ds);
    size_t diff = 0;
    while (diff < got.size() && (got[diff] == masked[diff])) ++diff;
    INFO("MaskToCandidateBlocks keep=" << keep << ": first difference at " << diff);
    CHECK(diff == got.size());
  }
}
