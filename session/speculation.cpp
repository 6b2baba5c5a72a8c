// Speculative decoding in the server's decode loop (--spec-tokens K, issue 21): a decoding turn
// that speculates runs, at each step, one verify pass of engine/speculative.h's SpeculativeStep
// instead of its row of the batched decode: its drafter proposes up to K tokens after the token
// it just produced, the model verifies them in one pass, and the kept drafts are produced one by
// one (each its own on_token, so a stream gets one delta per token) before the next step.
//
// Exactness: with greedy sampling the turn produces exactly the tokens of plain decoding, and
// its state, logits and everything the cache receives equal plain decoding's bit for bit:
// RollbackVerify leaves the state of feeding only the kept rows, the rollback happens before
// the turn can finish (Finish is what downloads the state into the cache), and a produced token
// that ends the turn (stop token, stop string, cancellation) is not fed, as plain decoding
// never feeds the last token. max_tokens: at most left - 1 drafts, so a pass never produces
// past it. Sampled turns follow `cedar generate --spec-tokens`'s rule and generator (rejection
// sampling, one std::mt19937_64 seeded with sampling.seed): the model's distribution, not
// plain decoding's tokens.
//
// Which turns speculate: every decoding turn unless it has a logits processor (grammar), logit
// adjustments (logit_bias, penalties) or logprobs: those change per token with what was
// produced before, which a pass decides several tokens at a time; they decode plainly.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/dspark.h"
#include "session/manager_impl.h"

namespace cedar::session {

void SessionManager::Impl::CheckSpeculation(const Model& m, const Backend& b, const ManagerOptions& o) {
  const int spec_tokens = o.spec_tokens;
  if (spec_tokens < 0 || spec_tokens > 15)
    throw std::invalid_argument("--spec-tokens: expected 0..15 drafts per verify pass, found " + std::to_string(spec_tokens));
  if (spec_tokens == 0) return;
  if (!m.dspark() && !o.make_drafter)
    throw std::invalid_argument("--spec-tokens " + std::to_string(spec_tokens) + ": model " + m.dir() +
                                " has no DSpark draft layers (mtp.* tensors; num_nextn_predict_layers is 0): serve it "
                                "without --spec-tokens");
  auto probe = b.NewSequence();
  if (!b.MutableHostState(*probe))
    throw std::invalid_argument("--spec-tokens: speculative decoding runs on the CPU backend only (--device cpu), found " +
                                std::string(b.name()));
  if (!o.make_drafter) DSparkDrafter check(m);  // throws on a drafter the model cannot run (e.g. its noise token outside the vocabulary)
  spdlog::info("speculative decoding: {} DSpark drafts per verify pass", spec_tokens);
}

bool SessionManager::Impl::Speculates(ActiveTurn& t) {
  if (t.spec_decided) return t.speculating;
  t.spec_decided = true;
  if (opt.spec_tokens == 0) return false;
  const TurnRequest& rq = t.request;
  if (rq.logits_processor || !rq.adjust.empty() || rq.top_logprobs >= 0) {
    spdlog::debug("turn {}: decodes without speculation (a grammar, logit_bias, penalties or logprobs)", t.seq);
    return false;
  }
  t.speculating = true;
  t.drafter = opt.make_drafter ? opt.make_drafter(*model) : std::make_unique<DSparkDrafter>(*model);
  t.spec_rng.seed(rq.sampling.seed);
  return true;
}

int32_t SessionManager::Impl::SpeculativeToken(ActiveTurn& t) {
  const int32_t tok = t.spec_next >= 0 ? t.spec_next : SpeculativeAnchor(t.logits, t.request.sampling, t.spec_rng);
  t.spec_next = -1;
  return tok;
}

void SessionManager::Impl::SpeculateRow(ActiveTurn& t) {
  const TurnRequest& rq = t.request;
  TurnAccounting& a = t.result.accounting;
  SequenceState* st = backend->MutableHostState(*t.state);
  if (!st) return Fail(t, ErrorKind::kInternal, "speculative decoding needs a host state (the CPU backend)");
  // A draft is fed only if a token follows it, and that token still fits under max_tokens.
  const int left = rq.max_tokens - int(t.result.output.size());
  const int k = std::max(0, std::min(opt.spec_tokens, left - 1));
  const char* reason = nullptr;
  try {
    SpeculativePass p = SpeculativeStep(*model, *st, t.result.output.back(), k, rq.sampling, t.spec_rng, *t.drafter,
                                        [&](int32_t d) { return (reason = Produce(t, d)) == nullptr; });
    t.logits = std::move(p.logits);
    t.spec_next = p.next;
    a.layer_token_units += p.rows * model->config().n_layers;
    a.spec_passes++;
    a.spec_drafted += p.drafted;
    a.spec_accepted += p.accepted;
    metrics.spec_passes++;
    metrics.spec_drafted += p.drafted;
    metrics.spec_accepted += p.accepted;
  } catch (const std::exception& e) {
    return Fail(t, ErrorKind::kInternal, e.what());
  }
  if (reason) Finish(t, reason);  // the state is rolled back: the cache sees only kept rows
}

}  // namespace cedar::session
