// Speculative decoding (issue 21, DSpark): a drafter proposes k tokens, the model verifies them
// in ONE pass over k + 1 rows (engine.h's VerifyPass), the longest agreeing prefix is kept and
// the state is rolled back past the rest (RollbackVerify). Greedy output and the final state are
// bit-identical to plain decoding (the few-row products are row-invariant, engine.h); sampled
// output keeps the model's distribution by the standard rejection rule (SpeculativeSample).
// The Model stays immutable: a drafter keeps its own state, passed in explicitly.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/sampling.h"

namespace cedar {

// Proposes tokens to follow a sequence. One per sequence; engine thread only.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Target layers whose output rows the drafter reads (VerifyPass captures them); may be empty.
  virtual std::vector<int> HiddenLayers() const { return {}; }
  // After a pass over the target rows [first, first + n): hidden[j] holds rows [n, ResidualWidth()]
  // leaving HiddenLayers()[j]; only the first `keep` rows stay in the sequence.
  virtual void Observe(int64_t first, int64_t keep, const std::vector<std::vector<float>>& hidden) {
    (void)first, (void)keep, (void)hidden;
  }
  // Up to k tokens to follow `anchor`, which is sampled but not yet fed (it goes to position
  // st.pos, the drafts after it). Greedy (sp.temperature == 0): q untouched. Otherwise each draft
  // is drawn with `rng` from q[i] ([V], sums to 1), which Propose fills.
  virtual void Propose(const SequenceState& st, int32_t anchor, int k, const SamplingParams& sp, std::mt19937_64& rng,
                       std::vector<int32_t>* drafts, std::vector<std::vector<double>>* q) = 0;
};

// One position of speculative sampling (Leviathan et al. 2023, Chen et al. 2023): `draft` was
// drawn from q; it is kept with probability min(1, p[draft] / q[draft]), otherwise the returned
// token is drawn from norm(max(0, p - q)). The result is distributed as p. p, q: [V], sum 1.
int32_t SpeculativeSample(const std::vector<double>& p, const std::vector<double>& q, int32_t draft, std::mt19937_64& rng,
                          bool* accepted);

// The capture a Prefill needs so that `d` sees the prompt (PrefillOptions::hidden): the drafter's
// HiddenLayers(), the last `window` rows (the most any drafter context keeps). After the Prefill,
// ObservePrefill hands d the rows every listed layer has (the common tail of the capture).
HiddenCapture PrefillCaptureFor(const Model& m, const Drafter& d);
void ObservePrefill(Drafter& d, const HiddenCapture& cap);

// One verify pass of speculative decoding, the step Generate repeats and the server's decode
// loop (session/speculation.cpp) runs per turn. `anchor` has been produced and not fed (it goes
// to st.pos); up to k drafts follow it (the drafter may give fewer). The pass feeds anchor +
// drafts in one VerifyPass, decides each draft in order (greedy: kept iff it is the argmax of the
// target's logits; sp.temperature > 0: SpeculativeSample, the drafts drawn from q), calls
// `produce(d)` for each kept draft in order, and rolls the state back to the rows kept. A
// produced draft that ends the sequence (produce returns false: a stop token, a stop string, a
// client gone) is produced but not fed, as plain decoding never feeds the last token. The
// state, the logits and the drafter then equal plain decoding's after the same tokens.
struct SpeculativePass {
  int64_t drafted = 0;             // drafts verified
  int64_t accepted = 0;            // of which kept (produced)
  int64_t rows = 0;                // rows the verify pass fed (anchor + drafts)
  int64_t keep = 0;                // rows kept in the state (anchor + accepted drafts, less an ending one)
  bool ended = false;              // produce returned false: the sequence ends at the last produced draft
  int32_t next = -1;               // a rejection's correction token: drawn from the target's logits,
                                   // to be produced next (not yet produced); -1 when none
  std::vector<float> logits;       // [V] the logits after the last kept row (they chose the last
                                   // produced token, or predict the next one)
};
// REQUIRES: 0 <= k <= 15; sp.temperature > 0 needs a drafter that fills q (engine thread).
SpeculativePass SpeculativeStep(const Model& m, SequenceState& st, int32_t anchor, int k, const SamplingParams& sp,
                                std::mt19937_64& rng, Drafter& drafter, const std::function<bool(int32_t)>& produce);
// The anchor of a pass when no correction token is pending: greedy argmax, else one draw from
// SamplingProbs(logits) with `rng` (the generator the whole speculative sequence shares).
int32_t SpeculativeAnchor(const std::vector<float>& logits, const SamplingParams& sp, std::mt19937_64& rng);

struct GenerateOptions {
  int max_tokens = 16;             // tokens to produce
  std::vector<int32_t> stops;      // a produced stop token ends generation (it is produced, not fed)
  SamplingParams sampling;         // temperature 0 = greedy
  int spec_tokens = 0;             // drafts per verify pass (0 = plain decoding; at most 15)
};

struct GenerateResult {
  std::vector<int32_t> tokens;     // produced tokens
  std::string finish = "length";   // "length" or "stop"
  std::vector<float> logits;       // [V] the last logits computed (after the last fed token)
  int64_t layer_token_units = 0;   // decoder work, rows through layers (rejected rows included)
  int64_t passes = 0;              // model passes (decode steps or verify passes)
  int64_t drafted = 0;             // draft tokens verified
  int64_t accepted = 0;            // of which kept
};

// Decodes from `logits` (of the state's last row). Plain (spec_tokens 0 or no drafter): produce
// a token, feed it with DecodeStep, as `cedar generate` always did (the last token is not fed).
// Speculative: the same tokens fed in the same order, several per pass; with greedy sampling the
// produced tokens, the final logits and the final state equal plain decoding's bit for bit.
GenerateResult Generate(const Model& m, SequenceState& st, std::vector<float> logits, const GenerateOptions& opt,
                        Drafter* drafter);

}  // namespace cedar
