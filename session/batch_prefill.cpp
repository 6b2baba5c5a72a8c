// The mixed scheduler's prefill with --batch-prefill (issue 14): the chunks a step gives to
// several turns run as one engine pass (engine/batch_prefill.h), and the decoder phases the
// step plans (chunk_plan.h) as another.
//
// The chunks are chosen exactly as for the unbatched loop (scheduler.cpp, PlanChunks in
// chunk_plan.h): the same boundaries, the same budget. Only how they run differs: pass k holds the k-th chunk of every turn
// that has one (a turn's own chunks depend on each other, so they stay in order). Each turn's
// rows keep products of their own within the pass (engine/row_groups.h), or share them with
// kernels::RowInvariantMatmul() on; either way a turn's result is the same bits as unbatched.
//
// With decode_in_prefill_pass (the default), the step's decode rows ride in the first pass: they
// go through the encoder layers beside the chunks (the layer's weights, streamed for the chunks,
// come from cache for them), then alone through the decoder layers. A step then costs about its
// prefill plus the decode rows' decoder half, instead of prefill plus a whole decode pass.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "session/manager_impl.h"

namespace cedar::session {

void SessionManager::Impl::PrefillBatched(const std::vector<TurnChunks>& plan, std::vector<ActiveTurn*>* going) {
  const SchedulerOptions& so = opt.scheduler;
  size_t passes = 0;
  int64_t rows = 0;
  for (const TurnChunks& p : plan) {
    passes = std::max(passes, p.lens.size());
    for (int64_t len : p.lens) rows += len;
  }
  for (size_t k = 0; k < passes; ++k) {
    std::vector<ActiveTurn*> who;
    std::vector<Sequence*> seqs;
    std::vector<std::span<const int32_t>> chunks;
    for (const TurnChunks& p : plan) {
      if (k >= p.lens.size() || p.t->done) continue;
      who.push_back(p.t);
      seqs.push_back(p.t->state.get());
      chunks.emplace_back(p.t->request.prompt.data() + p.t->encode_next, size_t(p.lens[k]));
    }
    if (who.empty()) continue;
    // The decode rows ride in the first pass (they are independent of the chunks' turns).
    std::vector<ActiveTurn*> dec;
    // A speculating turn (--spec-tokens) stays in `going`: DecodeRows runs its own verify pass.
    if (k == 0 && so.decode_in_prefill_pass) {
      std::vector<ActiveTurn*> keep;
      for (ActiveTurn* t : *going) (t->speculating ? keep : dec).push_back(t);
      going->swap(keep);
    }
    std::vector<Sequence*> dseqs;
    std::vector<int32_t> dtok;
    for (ActiveTurn* t : dec) {
      dseqs.push_back(t->state.get());
      dtok.push_back(t->result.output.back());
    }
    try {
      std::vector<std::vector<float>> logits;
      std::vector<StepStats> dstats;
      const std::vector<StepStats> s = dec.empty() ? backend->PrefillEncodeBatch(seqs, chunks)
                                                   : backend->EncodeDecodeBatch(seqs, chunks, dseqs, dtok, &logits, &dstats);
      for (size_t i = 0; i < dec.size(); ++i) {  // as DecodeRows
        dec[i]->logits = std::move(logits[i]);
        dec[i]->result.accounting.layer_token_units += dstats[i].layer_token_units;
      }
      if (!dec.empty()) {
        metrics.decode_batches++;
        metrics.decode_batch_rows += int64_t(dec.size());
        metrics.decode_rows_in_prefill += int64_t(dec.size());
      }
      for (size_t i = 0; i < who.size(); ++i) {
        TurnAccounting& a = who[i]->result.accounting;
        a.prefill_units += s[i].layer_token_units;
        a.layer_token_units += s[i].layer_token_units;
        who[i]->encode_next += int64_t(chunks[i].size());
      }
      metrics.prefill_batches++;
      metrics.prefill_batch_turns_max = std::max(metrics.prefill_batch_turns_max, int64_t(who.size()));
    } catch (const std::exception& e) {
      for (ActiveTurn* t : who) Fail(*t, ErrorKind::kInternal, e.what());
      for (ActiveTurn* t : dec) Fail(*t, ErrorKind::kInternal, e.what());
    }
  }
  // The decoder phases planned for this step (after their last chunk), together.
  std::vector<ActiveTurn*> fin;
  std::vector<Sequence*> seqs;
  std::vector<PrefillMode> modes;
  for (const TurnChunks& p : plan)
    if (!p.t->done && p.finish) {
      fin.push_back(p.t);
      seqs.push_back(p.t->state.get());
      modes.push_back(p.t->mode);
    }
  if (!fin.empty()) {
    std::vector<PrefillResult> res;
    try {
      res = backend->PrefillFinishBatch(seqs, modes);
      metrics.prefill_batches++;
      metrics.prefill_batch_turns_max = std::max(metrics.prefill_batch_turns_max, int64_t(fin.size()));
    } catch (const std::exception& e) {
      for (ActiveTurn* t : fin) Fail(*t, ErrorKind::kInternal, e.what());
      fin.clear();
    }
    for (size_t i = 0; i < fin.size(); ++i) {
      try {
        EndPrefill(*fin[i], std::move(res[i]));
      } catch (const std::exception& e) {
        Fail(*fin[i], ErrorKind::kInternal, e.what());
      }
    }
  }
  spdlog::debug("batched prefill step: {} turns, {} rows in {} encode passes, {} decoder phases", plan.size(), rows, passes,
                fin.size());
}

}  // namespace cedar::session
