#include "engine/golden_check.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/safetensors.h"

namespace cedar {

namespace {

double RelError(const float* a, const float* b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Entries selected by one side only must sit at the selection boundary (a score tie).
int TopkMismatches(const std::vector<int32_t>& mine, const std::vector<int32_t>& gold, const std::vector<float>& scores, int k) {
  std::vector<float> sorted;
  for (float s : scores)
    if (std::isfinite(s)) sorted.push_back(s);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  if (int(sorted.size()) <= k) return mine == gold ? 0 : int(std::max(mine.size(), gold.size()));
  const double boundary = sorted[size_t(k - 1)];
  const double tie = 1e-4 * std::max(1.0, std::fabs(boundary));
  std::vector<int32_t> diff;
  std::set_symmetric_difference(mine.begin(), mine.end(), gold.begin(), gold.end(), std::back_inserter(diff));
  int bad = 0;
  for (int32_t j : diff)
    if (j < 0 || size_t(j) >= scores.size() || std::fabs(scores[size_t(j)] - boundary) > tie) ++bad;
  return bad;
}

}  // namespace

GoldenReport CheckGolden(const Model& m, const std::string& golden_path, double tol) {
  BackendOptions cpu;
  cpu.device = "cpu";
  return CheckGolden(*MakeBackend(m, cpu), golden_path, tol);
}

GoldenReport CheckGolden(const Backend& b, const std::string& golden_path, double tol) {
  const ModelConfig& c = b.model().config();
  SafetensorsFile g(golden_path);
  GoldenReport rep;
  const std::vector<int32_t> prompt = g.ReadInts("prompt");
  const std::vector<int32_t> dec = g.ReadInts("decode_tokens");
  const size_t V = size_t(c.vocab_size);
  auto compare = [&](const std::string& where, const std::vector<float>& mine, const float* gold) {
    const double e = RelError(mine.data(), gold, V);
    rep.checks.push_back({{"check", where}, {"rel_error", e}});
    if (e > rep.worst_logit_rel_error) {
      rep.worst_logit_rel_error = e;
      rep.worst_where = where;
    }
    if (!(e <= tol)) rep.ok = false;
  };
  auto decode_all = [&](const std::string& prefix, Sequence& st) {
    const std::string name = prefix + ".decode_logits";
    if (!g.Find(name)) return;
    const std::vector<float> gold = g.ReadFloats(name);
    for (size_t i = 0; i < dec.size(); ++i) {
      std::vector<float> lg = b.DecodeStep(st, dec[i]);
      compare(prefix + ".decode[" + std::to_string(i) + "]", lg, gold.data() + i * V);
    }
  };
  for (PrefillMode mode : {PrefillMode::kFull, PrefillMode::kBounded, PrefillMode::kBoundedPaper, PrefillMode::kExact}) {
    const std::string mn = ModeName(mode);
    if (!g.Find(mn + ".prefill_logits")) continue;
    std::unique_ptr<Sequence> st = b.NewSequence();
    IndexCapture cap;
    PrefillOptions opt;
    opt.mode = mode;
    opt.capture = &cap;
    PrefillResult r = b.Prefill(*st, prompt, opt);
    compare(mn + ".prefill", r.logits, g.ReadFloats(mn + ".prefill_logits").data());
    for (int l : c.index_source_layers) {
      const std::string tn = mn + ".topk." + std::to_string(l);
      if (!g.Find(tn) || !cap.topk.count(l)) continue;
      const int bad = TopkMismatches(cap.topk[l], g.ReadInts(tn), g.ReadFloats(mn + ".scores." + std::to_string(l)), c.index_topk);
      rep.topk_checked++;
      rep.topk_mismatches += bad;
      rep.checks.push_back({{"check", tn}, {"mismatches", bad}});
      if (bad) rep.ok = false;
    }
    decode_all(mn, *st);
  }
  if (g.Find("replay.prefill_logits")) {
    const int64_t P = std::stoll(g.Metadata().at("replay_P"));
    std::unique_ptr<Sequence> st = b.NewSequence();
    PrefillOptions full;
    b.Prefill(*st, std::span<const int32_t>(prompt.data(), size_t(P)), full);
    // What a cache eviction leaves: the pools only (through a host copy, as the cache holds it).
    SequenceState host = b.Download(*st);
    host.DropWindowsAndResidual();
    st = b.Upload(host);
    b.EncoderReplay(*st);
    PrefillOptions bounded;
    bounded.mode = PrefillMode::kBounded;
    PrefillResult r = b.Prefill(*st, std::span<const int32_t>(prompt.data() + P, prompt.size() - size_t(P)), bounded);
    compare("replay.prefill", r.logits, g.ReadFloats("replay.prefill_logits").data());
    decode_all("replay", *st);
  }
  return rep;
}

}  // namespace cedar
