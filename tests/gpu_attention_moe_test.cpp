// CUDA kernels against the scalar references, part 3: sink attention over window + selected
// entries, and the MoE router with the gather and scatter of expert rows (engine/ffn.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "tests/gpu_test_util.h"

namespace ref = cedar::kernels::ref;
using namespace gpu_test;

TEST_CASE("SinkAttention matches ref::SinkAttention per row: windows in a ring, selections, empty sources") {
  for (DType t : {DType::kF32, DType::kBF16})
    for (int n_win : {0, 1, 5, 16})
      for (int n_sel : {0, 1, 7, 33})
        for (int dim : {1, 8, 33, 512}) {
          const int heads = 3, pool_n = 40, rows = 3, cap = 20;
          // Row r sees max(n_win - r, 0) window entries starting at ring slot 17 + 2r (wrapping)
          // and max(n_sel - 3r, 0) selected pool entries.
          const auto q = Random(size_t(rows) * heads * dim, 40 + dim, 2.0f);
          const auto ring = RoundTo(Random(size_t(cap) * dim, 41 + n_win), t);
          const auto pool = RoundTo(Random(size_t(pool_n) * dim, 42), t);
          const auto sink = Random(size_t(heads), 43);
          const int ld_sel = std::max(n_sel, 1);
          std::vector<int32_t> first(rows), nw(rows), ns(rows), sel(size_t(rows) * ld_sel, 0);
          std::vector<float> want(size_t(rows) * heads * dim);
          const float scale = 1.0f / std::sqrt(float(dim));
          for (int r = 0; r < rows; ++r) {
            first[size_t(r)] = 17 + 2 * r;
            nw[size_t(r)] = std::max(n_win - r, 0);
            ns[size_t(r)] = std::max(n_sel - 3 * r, 0);
            for (int i = 0; i < ns[size_t(r)]; ++i) sel[size_t(r) * ld_sel + i] = (i * 7 + 3 + r) % pool_n;
            std::vector<float> win;
            for (int i = 0; i < nw[size_t(r)]; ++i) {
              const size_t slot = size_t(first[size_t(r)] + i) % cap;
              win.insert(win.end(), ring.begin() + slot * dim, ring.begin() + (slot + 1) * dim);
            }
            ref::SinkAttention(q.data() + size_t(r) * heads * dim, heads, dim, win.data(), nw[size_t(r)], pool.data(),
                               sel.data() + size_t(r) * ld_sel, ns[size_t(r)], sink.data(), scale,
                               want.data() + size_t(r) * heads * dim);
          }
          Dev dq = Upload(q, DType::kF32), dring = Upload(ring, t), dpool = Upload(pool, t), dsink = Upload(sink, DType::kF32);
          Dev dfirst = UploadRaw(first), dnw = UploadRaw(nw), dns = UploadRaw(ns), dsel = UploadRaw(sel);
          Dev dout = Poisoned(want.size(), DType::kF32);
          cu::SinkAttentionArgs a;
          a.q = dq.f32(), a.out = dout.f32(), a.n_rows = rows, a.n_heads = heads, a.dim = dim, a.entry_type = t;
          a.win = dring.p(), a.win_first = dfirst.i32(), a.n_win = dnw.i32(), a.win_capacity = cap;
          a.pool = dpool.p(), a.sel = dsel.i32(), a.ld_sel = ld_sel, a.n_sel = dns.i32();
          a.sink = dsink.f32(), a.scale = scale;
          GPU_REQUIRE_OK(cu::SinkAttention(a, nullptr));
          ExpectClose("SinkAttention win=" + std::to_string(n_win) + " sel=" + std::to_string(n_sel) + " dim=" +
                          std::to_string(dim) + " " + Str(t),
                      Download(dout), want,
                      Eps(DType::kF32) * 32 * (1 + std::sqrt(double(dim))) * (1 + std::sqrt(double(n_win + n_sel))));
        }
}

TEST_CASE("SinkAttention at the model's size: 64 heads of 512, 128 window + 512 selected BF16 entries") {
  const int heads = 64, dim = 512, n_win = 128, n_sel = 512, pool_n = 4096;
  const auto q = Random(size_t(heads) * dim, 44, 0.05f);
  const auto win = RoundTo(Random(size_t(n_win) * dim, 45), DType::kBF16);
  const auto pool = RoundTo(Random(size_t(pool_n) * dim, 46), DType::kBF16);
  const auto sink = Random(size_t(heads), 47);
  std::vector<int32_t> sel(n_sel), first = {0}, nw = {n_win}, ns = {n_sel};
  for (int i = 0; i < n_sel; ++i) sel[size_t(i)] = i * 8 + 1;
  std::vector<float> want(size_t(heads) * dim);
  const float scale = 1.0f / std::sqrt(float(dim));
  ref::SinkAttention(q.data(), heads, dim, win.data(), n_win, pool.data(), sel.data(), n_sel, sink.data(), scale, want.data());
  Dev dq = Upload(q, DType::kF32), dwin = Upload(win, DType::kBF16), dpool = Upload(pool, DType::kBF16);
  Dev dsink = Upload(sink, DType::kF32), dsel = UploadRaw(sel), dfirst = UploadRaw(first), dnw = UploadRaw(nw), dns = UploadRaw(ns);
  Dev dout = Poisoned(want.size(), DType::kF32);
  cu::SinkAttentionArgs a;
  a.q = dq.f32(), a.out = dout.f32(), a.n_rows = 1, a.n_heads = heads, a.dim = dim, a.entry_type = DType::kBF16;
  a.win = dwin.p(), a.win_first = dfirst.i32(), a.n_win = dnw.i32();
  a.pool = dpool.p(), a.sel = dsel.i32(), a.ld_sel = n_sel, a.n_sel = dns.i32(), a.sink = dsink.f32(), a.scale = scale;
  GPU_REQUIRE_OK(cu::SinkAttention(a, nullptr));
  ExpectClose("SinkAttention 64x512 over 640 entries", Download(dout), want,
              Eps(DType::kF32) * 32 * (1 + std::sqrt(double(dim))) * (1 + std::sqrt(double(n_win + n_sel))));
}

namespace {

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// engine/ffn.cpp's router for one row: experts in choice order and their weights.
void RouteRow(const float* logits, const float* bias, int ne, int k, float route_scale, int32_t* experts, float* weights) {
  std::vector<float> s(static_cast<size_t>(ne)), choice(static_cast<size_t>(ne));
  for (int e = 0; e < ne; ++e) {
    s[size_t(e)] = std::sqrt(Softplus(logits[e]));
    choice[size_t(e)] = s[size_t(e)] + bias[e];
  }
  std::vector<int32_t> order(static_cast<size_t>(ne));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += s[size_t(order[size_t(j)])];
  for (int j = 0; j < k; ++j) {
    experts[j] = order[size_t(j)];
    weights[j] = route_scale * s[size_t(order[size_t(j)])] / sum;
  }
}

// Router logits with exact ties (few distinct values) so the tie rule is exercised.
std::vector<float> TiedLogits(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(int(rng() % 16)) * 0.5f - 4.0f;
  return v;
}

}  // namespace

TEST_CASE("MoeRoute equals the engine's router; MoeGroup groups choices by expert with rows ascending") {
  for (int ne : {8, 64, 384})
    for (int k : {1, 2, 6})
      for (int n : {1, 5, 37, 300}) {
        const auto logits = TiedLogits(size_t(n) * ne, 90 + ne + k);
        std::vector<float> bias(static_cast<size_t>(ne));
        for (int e = 0; e < ne; ++e) bias[size_t(e)] = float(e % 3) * 0.25f;
        std::vector<int32_t> want_e(size_t(n) * k);
        std::vector<float> want_w(size_t(n) * k);
        for (int r = 0; r < n; ++r)
          RouteRow(logits.data() + size_t(r) * ne, bias.data(), ne, k, 1.5f, want_e.data() + size_t(r) * k, want_w.data() + size_t(r) * k);
        Dev dl = Upload(logits, DType::kF32), db = Upload(bias, DType::kF32);
        Dev de = UploadRaw(std::vector<int32_t>(size_t(n) * k, -7)), dw = Poisoned(size_t(n) * k, DType::kF32);
        GPU_REQUIRE_OK(cu::MoeRoute(dl.f32(), db.f32(), n, ne, k, 1.5f, de.i32(), dw.f32(), nullptr));
        const std::string what = "MoeRoute experts=" + std::to_string(ne) + " k=" + std::to_string(k) + " rows=" + std::to_string(n);
        const auto experts = DownloadRaw<int32_t>(de, size_t(n) * k);
        {
          INFO(what);
          CHECK(experts == want_e);
        }
        ExpectClose(what + " weights", Download(dw), want_w, Eps(DType::kF32) * 64);

        Dev dcounts = UploadRaw(std::vector<int32_t>(size_t(ne), -7)), doff = UploadRaw(std::vector<int32_t>(size_t(ne) + 1, -7));
        Dev drows = UploadRaw(std::vector<int32_t>(size_t(n) * k, -7)), dpos = UploadRaw(std::vector<int32_t>(size_t(n) * k, -7));
        GPU_REQUIRE_OK(cu::MoeGroup(de.i32(), n, ne, k, dcounts.i32(), doff.i32(), drows.i32(), dpos.i32(), nullptr));
        const auto counts = DownloadRaw<int32_t>(dcounts, size_t(ne));
        const auto off = DownloadRaw<int32_t>(doff, size_t(ne) + 1);
        const auto rows = DownloadRaw<int32_t>(drows, size_t(n) * k);
        const auto pos = DownloadRaw<int32_t>(dpos, size_t(n) * k);
        // engine/ffn.cpp's rows_of[e]: the rows routed to e, ascending.
        std::vector<int32_t> want_rows, want_counts(size_t(ne), 0), want_off(size_t(ne) + 1, 0);
        for (int e = 0; e < ne; ++e) {
          for (int r = 0; r < n; ++r)
            for (int j = 0; j < k; ++j)
              if (want_e[size_t(r) * k + j] == e) want_rows.push_back(r), ++want_counts[size_t(e)];
          want_off[size_t(e) + 1] = want_off[size_t(e)] + want_counts[size_t(e)];
        }
        INFO(what << " MoeGroup");
        CHECK(counts == want_counts);
        CHECK(off == want_off);
        CHECK(rows == want_rows);
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < k; ++j) {
            const int p = pos[size_t(r) * k + j], e = want_e[size_t(r) * k + j];
            CHECK(p >= want_off[size_t(e)]);
            CHECK(p < want_off[size_t(e) + 1]);
            CHECK(rows[size_t(p)] == r);
          }
      }
}

TEST_CASE("A routed FFN built from MoeRoute, MoeGroup, MoeGather, Matmul, SwiGLU and MoeScatterAdd equals engine/ffn.cpp") {
  const int n = 13, d = 32, inter = 48, ne = 8, k = 2;
  const float limit = 2.0f, route_scale = 1.5f;
  cu::Blas blas;
  GPU_REQUIRE_OK(blas.Init());
  for (DType act : {DType::kF32, DType::kBF16}) {
    const auto x = RoundTo(Random(size_t(n) * d, 100), act), h0 = Random(size_t(n) * d, 101);
    const auto gate = Random(size_t(ne) * d, 102), bias = Random(size_t(ne), 103, 0.1f);
    std::vector<std::vector<float>> w1(ne), w2(ne), w3(ne);
    for (int e = 0; e < ne; ++e) {
      w1[size_t(e)] = RoundTo(Random(size_t(inter) * d, 200 + e, 0.2f), DType::kBF16);
      w3[size_t(e)] = RoundTo(Random(size_t(inter) * d, 300 + e, 0.2f), DType::kBF16);
      w2[size_t(e)] = RoundTo(Random(size_t(d) * inter, 400 + e, 0.2f), DType::kBF16);
    }
    // Reference: engine/ffn.cpp with the scalar kernels, in F32 (gate logits from F32 x).
    std::vector<float> logits(size_t(n) * ne), want = h0;
    ref::Matmul(x.data(), gate.data(), logits.data(), n, d, ne);
    std::vector<int32_t> ex(size_t(n) * k);
    std::vector<float> wt(size_t(n) * k);
    for (int r = 0; r < n; ++r) RouteRow(logits.data() + size_t(r) * ne, bias.data(), ne, k, route_scale, ex.data() + size_t(r) * k, wt.data() + size_t(r) * k);
    for (int e = 0; e < ne; ++e)
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < k; ++j) {
          if (ex[size_t(r) * k + j] != e) continue;
          std::vector<float> g(static_cast<size_t>(inter)), u(static_cast<size_t>(inter)), y(static_cast<size_t>(d));
          ref::Matmul(x.data() + size_t(r) * d, w1[size_t(e)].data(), g.data(), 1, d, inter);
          ref::Matmul(x.data() + size_t(r) * d, w3[size_t(e)].data(), u.data(), 1, d, inter);
          ref::SwiGLU(g.data(), u.data(), g.data(), inter, limit);
          ref::Matmul(g.data(), w2[size_t(e)].data(), y.data(), 1, inter, d);
          for (int i = 0; i < d; ++i) want[size_t(r) * d + i] += wt[size_t(r) * k + j] * y[size_t(i)];
        }
    // Device: the same FFN from the kernels. Gate in F32 so the choice matches the reference.
    Dev dx = Upload(x, act), dxf = Upload(x, DType::kF32), dgate = Upload(gate, DType::kF32), dbias = Upload(bias, DType::kF32);
    Dev dlog = Poisoned(size_t(n) * ne, DType::kF32), dh = Upload(h0, DType::kF32);
    Dev de = UploadRaw(std::vector<int32_t>(size_t(n) * k)), dw = Poisoned(size_t(n) * k, DType::kF32);
    GPU_REQUIRE_OK(cu::Matmul(blas, dxf.p(), DType::kF32, dgate.p(), DType::kF32, dlog.p(), DType::kF32, n, d, ne, 0.0f, nullptr));
    GPU_REQUIRE_OK(cu::MoeRoute(dlog.f32(), dbias.f32(), n, ne, k, route_scale, de.i32(), dw.f32(), nullptr));
    Dev dcounts = UploadRaw(std::vector<int32_t>(ne)), doff = UploadRaw(std::vector<int32_t>(ne + 1));
    Dev drows = UploadRaw(std::vector<int32_t>(size_t(n) * k)), dpos = UploadRaw(std::vector<int32_t>(size_t(n) * k));
    GPU_REQUIRE_OK(cu::MoeGroup(de.i32(), n, ne, k, dcounts.i32(), doff.i32(), drows.i32(), dpos.i32(), nullptr));
    Dev dxg = Poisoned(size_t(n) * k * d, act), dg = Poisoned(size_t(n) * k * 2 * inter, DType::kF32);
    Dev dact = Poisoned(size_t(n) * k * inter, act), dy = Poisoned(size_t(n) * k * d, DType::kF32);
    GPU_REQUIRE_OK(cu::MoeGather(dx.p(), act, drows.i32(), n * k, d, dxg.p(), nullptr));
    const auto off = DownloadRaw<int32_t>(doff, size_t(ne) + 1);
    std::vector<float> w13(size_t(2) * inter * d);  // W1 and W3 stacked: one product per expert
    for (int e = 0; e < ne; ++e) {
      const int rows = off[size_t(e) + 1] - off[size_t(e)];
      std::copy(w1[size_t(e)].begin(), w1[size_t(e)].end(), w13.begin());
      std::copy(w3[size_t(e)].begin(), w3[size_t(e)].end(), w13.begin() + size_t(inter) * d);
      Dev dw13 = Upload(w13, DType::kBF16), dw2 = Upload(w2[size_t(e)], DType::kBF16);
      const size_t a = cu::SizeOf(act), r0 = size_t(off[size_t(e)]);
      GPU_REQUIRE_OK(cu::Matmul(blas, static_cast<char*>(dxg.p()) + r0 * d * a, act, dw13.p(), DType::kBF16,
                                dg.f32() + r0 * 2 * inter, DType::kF32, rows, d, 2 * inter, 0.0f, nullptr));
      GPU_REQUIRE_OK(cu::SwiGLU(dg.f32() + r0 * 2 * inter, dg.f32() + r0 * 2 * inter + inter, DType::kF32,
                                static_cast<char*>(dact.p()) + r0 * inter * a, act, rows, inter, 2 * inter, inter, limit, nullptr));
      GPU_REQUIRE_OK(cu::Matmul(blas, static_cast<char*>(dact.p()) + r0 * inter * a, act, dw2.p(), DType::kBF16,
                                dy.f32() + r0 * d, DType::kF32, rows, inter, d, 0.0f, nullptr));
      GPU_REQUIRE_OK(cu::Synchronize(nullptr));  // dw13 and dw2 are freed at the end of this iteration
    }
    GPU_REQUIRE_OK(cu::MoeScatterAdd(dy.p(), DType::kF32, dpos.i32(), dw.f32(), n, k, d, dh.f32(), nullptr));
    // Products with BF16 weights round their activations (x, the SwiGLU output) to BF16.
    ExpectClose(std::string("routed FFN, activations ") + Str(act), Download(dh), want, Eps(DType::kBF16) * 2);
  }
}

TEST_CASE("MoeGather copies rows; MoeScatterAdd adds the weighted expert rows back") {
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int n = 11, k = 3, dim = 70, total = n * k;
    const auto x = RoundTo(Random(size_t(n) * dim, 110), t);
    std::vector<int32_t> rows(static_cast<size_t>(total)), pos(static_cast<size_t>(total));
    for (int i = 0; i < total; ++i) rows[size_t(i)] = (i * 5) % n;
    std::mt19937_64 rng(111);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    Dev dx = Upload(x, t), drows = UploadRaw(rows), dxg = Poisoned(size_t(total) * dim, t);
    GPU_REQUIRE_OK(cu::MoeGather(dx.p(), t, drows.i32(), total, dim, dxg.p(), nullptr));
    std::vector<float> want_g;
    for (int i = 0; i < total; ++i) want_g.insert(want_g.end(), x.begin() + size_t(rows[size_t(i)]) * dim, x.begin() + size_t(rows[size_t(i)] + 1) * dim);
    ExpectClose(std::string("MoeGather ") + Str(t), Download(dxg), want_g, 0.0);

    const auto y = RoundTo(Random(size_t(total) * dim, 112), t), w = Random(size_t(total), 113), h = Random(size_t(n) * dim, 114);
    std::vector<float> want = h;
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < dim; ++i) {
        double acc = 0;
        for (int j = 0; j < k; ++j) acc += double(w[size_t(r) * k + j]) * y[size_t(pos[size_t(r) * k + j]) * dim + i];
        want[size_t(r) * dim + i] = float(h[size_t(r) * dim + i] + acc);
      }
    Dev dy = Upload(y, t), dw = Upload(w, DType::kF32), dpos = UploadRaw(pos), dh = Upload(h, DType::kF32);
    GPU_REQUIRE_OK(cu::MoeScatterAdd(dy.p(), t, dpos.i32(), dw.f32(), n, k, dim, dh.f32(), nullptr));
    ExpectClose(std::string("MoeScatterAdd ") + Str(t), Download(dh), want, Eps(DType::kF32) * 8 * k);
  }
}
