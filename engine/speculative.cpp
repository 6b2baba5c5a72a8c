#include "engine/speculative.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace cedar {

int32_t SpeculativeSample(const std::vector<double>& p, const std::vector<double>& q, int32_t draft, std::mt19937_64& rng,
                          bool* accepted) {
  const double pd = p[size_t(draft)], qd = q[size_t(draft)];
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // q[draft] > 0 since draft was drawn from q; p >= q accepts always.
  if (pd >= qd || u(rng) < pd / qd) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  std::vector<double> residual(p.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += residual[i] = std::max(0.0, p[i] - q[i]);
  // A rejection implies p[draft] < q[draft], so some other p[i] > q[i]: sum > 0 but for rounding.
  return sum > 0 ? SampleFrom(residual, rng) : SampleFrom(p, rng);
}

HiddenCapture PrefillCaptureFor(const Model& m, const Drafter& d) {
  HiddenCapture cap;
  cap.layers = d.HiddenLayers();
  cap.max_rows = m.config().window;
  return cap;
}

void ObservePrefill(Drafter& d, const HiddenCapture& cap) {
  if (cap.layers.empty() || cap.rows.size() != cap.layers.size() || cap.width <= 0) return;
  // Rows [lo, hi) that every layer has: layers of a bounded/exact decoder phase pass fewer rows.
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  for (size_t j = 0; j < cap.layers.size(); ++j) {
    const int64_t n = int64_t(cap.rows[j].size()) / cap.width;
    if (n == 0) return;
    lo = std::max(lo, cap.first[j]);
    hi = std::min(hi, cap.first[j] + n);
  }
  if (hi <= lo) return;
  std::vector<std::vector<float>> rows(cap.layers.size());
  for (size_t j = 0; j < cap.layers.size(); ++j) {
    const auto from = cap.rows[j].begin() + (lo - cap.first[j]) * cap.width;
    rows[j].assign(from, from + (hi - lo) * cap.width);
  }
  d.Observe(lo, hi - lo, rows);
}

namespace {

bool IsStop(const GenerateOptions& o, int32_t t) { return std::find(o.stops.begin(), o.stops.end(), t) != o.stops.end(); }

}  // namespace

int32_t SpeculativeAnchor(const std::vector<float>& logits, const SamplingParams& sp, std::mt19937_64& rng) {
  return sp.temperature <= 0.0f ? Argmax(logits) : SampleFrom(SamplingProbs(logits, sp), rng);
}

SpeculativePass SpeculativeStep(const Model& m, SequenceState& st, int32_t anchor, int k, const SamplingParams& sp,
                                std::mt19937_64& rng, Drafter& drafter, const std::function<bool(int32_t)>& produce) {
  if (k < 0 || k > 15) throw std::invalid_argument("speculative pass: expected 0..15 drafts, found " + std::to_string(k));
  const bool greedy = sp.temperature <= 0.0f;
  const std::vector<int> hidden_layers = drafter.HiddenLayers();
  SpeculativePass p;
  std::vector<int32_t> rows{anchor}, drafts;
  std::vector<std::vector<double>> q;
  if (k > 0) drafter.Propose(st, anchor, k, sp, rng, &drafts, &q);
  if (int(drafts.size()) > k) drafts.resize(size_t(k));
  if (!greedy && q.size() < drafts.size())
    throw std::logic_error("speculative sampling: the drafter gave " + std::to_string(drafts.size()) + " drafts but " +
                           std::to_string(q.size()) + " draft distributions");
  rows.insert(rows.end(), drafts.begin(), drafts.end());
  VerifyMark mark;
  std::vector<std::vector<float>> hidden;
  std::vector<std::vector<float>> R = VerifyPass(m, st, rows, &mark, &hidden_layers, &hidden);
  p.rows = int64_t(rows.size());
  p.drafted = int64_t(drafts.size());
  // R[i]: logits after rows[0..i]; they decide drafts[i].
  size_t j = 0;
  for (; j < drafts.size(); ++j) {
    const int32_t d = drafts[j];
    bool ok;
    int32_t tok;
    if (greedy) {
      tok = Argmax(R[j]);
      ok = tok == d;
    } else {
      tok = SpeculativeSample(SamplingProbs(R[j], sp), q[j], d, rng, &ok);
    }
    if (!ok) {
      p.next = tok;
      break;
    }
    ++p.accepted;
    if (!produce(d)) {
      p.ended = true;
      ++j;
      break;
    }
  }
  // Rows kept: the anchor and the accepted drafts, but a produced token that ends is not fed.
  p.keep = p.ended ? int64_t(j) : int64_t(j) + 1;
  RollbackVerify(m, st, mark, p.keep);
  drafter.Observe(mark.pos0, p.keep, hidden);
  p.logits = std::move(R[size_t(p.keep - 1)]);
  spdlog::debug("speculative pass at {}: {} drafts, {} kept", mark.pos0, drafts.size(), p.keep);
  return p;
}

GenerateResult Generate(const Model& m, SequenceState& st, std::vector<float> logits, const GenerateOptions& opt, Drafter* drafter) {
  GenerateResult res;
  if (opt.spec_tokens < 0 || opt.spec_tokens > 15)
    throw std::invalid_argument("--spec-tokens: expected 0..15 drafts per verify pass, found " + std::to_string(opt.spec_tokens));
  if (opt.spec_tokens == 0 || drafter == nullptr) {
    Sampler sampler(opt.sampling);
    for (int i = 0; i < opt.max_tokens; ++i) {
      const int32_t next = sampler.Sample(logits);
      res.tokens.push_back(next);
      if (IsStop(opt, next)) {
        res.finish = "stop";
        break;
      }
      if (i + 1 == opt.max_tokens) break;
      StepStats s;
      logits = DecodeStep(m, st, next, &s);
      res.layer_token_units += s.layer_token_units;
      ++res.passes;
    }
    res.logits = std::move(logits);
    return res;
  }
  std::mt19937_64 rng(opt.sampling.seed);
  int32_t next = -1;  // a token already drawn (a rejection's correction), else sample `logits`
  while (int(res.tokens.size()) < opt.max_tokens) {
    const int32_t t0 = next >= 0 ? next : SpeculativeAnchor(logits, opt.sampling, rng);
    res.tokens.push_back(t0);
    if (IsStop(opt, t0)) {
      res.finish = "stop";
      break;
    }
    const int left = opt.max_tokens - int(res.tokens.size());
    if (left == 0) break;
    // A draft is fed only if a token follows it: at most left - 1 drafts.
    const int k = std::min(opt.spec_tokens, left - 1);
    SpeculativePass p = SpeculativeStep(m, st, t0, k, opt.sampling, rng, *drafter, [&](int32_t d) {
      res.tokens.push_back(d);
      return !IsStop(opt, d);
    });
    ++res.passes;
    res.layer_token_units += p.rows * m.config().n_layers;
    res.drafted += p.drafted;
    res.accepted += p.accepted;
    next = p.next;
    logits = std::move(p.logits);
    if (p.ended) {
      res.finish = "stop";
      break;
    }
  }
  res.logits = std::move(logits);
  return res;
}

}  // namespace cedar
