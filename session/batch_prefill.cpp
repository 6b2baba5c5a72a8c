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
#include <chrono>
#include <optional>
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
  const auto t0 = std::chrono::steady_clock::now();
  int64_t pure_rows = 0;  // chunk rows of the passes no decode rows rode in, and their ms
  double pure_ms = 0;
  for (size_t k = 0; k < passes; ++k) {
    const auto pass_start = std::chrono::steady_clock::now();
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
      if (dec.empty()) {
        for (const auto& ch : chunks) pure_rows += int64_t(ch.size());
        pure_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - pass_start).count();
      }
    } catch (const std::exception& e) {
      for (ActiveTurn* t : who) Fail(*t, ErrorKind::kInternal, e.what());
      for (ActiveTurn* t : dec) Fail(*t, ErrorKind::kInternal, e.what());
    }
  }
  // The encode passes (with the decode rows riding in the first) count as the chunks' rate.
  const auto t1 = std::chrono::steady_clock::now();
  if (rows > 0) step_cost.ObserveChunks(rows, std::chrono::duration<double, std::milli>(t1 - t0).count());
  if (pure_rows > 0) step_cost.ObservePureChunks(pure_rows, pure_ms);
  // The decoder phases planned for this step (after their last chunk), together: whole, or
  // each its planned layers (PrefillFinishLayers: the turns' rows share the layers they both run).
  std::vector<ActiveTurn*> fin;
  std::vector<Sequence*> seqs;
  std::vector<PrefillMode> modes;
  std::vector<int> layers;
  std::vector<bool> ends;  // the phase ends in this step (as planned)
  int64_t finish_rows = 0;
  bool in_parts = false;
  for (const TurnChunks& p : plan)
    if (!p.t->done && (p.finish || p.finish_layers > 0)) {
      fin.push_back(p.t);
      seqs.push_back(p.t->state.get());
      modes.push_back(p.t->mode);
      layers.push_back(p.finish_layers);
      ends.push_back(p.finish);
      finish_rows += p.finish_rows;
      in_parts = in_parts || p.finish_layers > 0;
    }
  size_t ended = 0;
  if (!fin.empty()) {
    std::vector<std::optional<PrefillResult>> res;
    try {
      if (in_parts) {
        if (std::count(layers.begin(), layers.end(), 0) > 0) throw std::logic_error("decoder phases whole and in parts in one step");
        res = backend->PrefillFinishLayers(seqs, modes, layers);
        for (size_t i = 0; i < fin.size(); ++i) {
          fin[i]->finish_layers_done += layers[i];
          if (res[i].has_value() != ends[i]) throw std::logic_error("a decoder phase did not end where it was planned to");
        }
      } else {
        for (PrefillResult& r : backend->PrefillFinishBatch(seqs, modes)) res.emplace_back(std::move(r));
      }
      metrics.prefill_batches++;
      metrics.prefill_batch_turns_max = std::max(metrics.prefill_batch_turns_max, int64_t(fin.size()));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
      step_cost.ObserveFinish(finish_rows, ms);
      // Each turn's own rate for its next part: the pass's (shared by its turns' rows).
      if (finish_rows > 0)
        for (ActiveTurn* t : fin) t->finish_ms_per_row = ms / double(finish_rows);
    } catch (const std::exception& e) {
      for (ActiveTurn* t : fin) Fail(*t, ErrorKind::kInternal, e.what());
      fin.clear();
    }
    for (size_t i = 0; i < fin.size(); ++i) {
      if (!res[i]) {
        metrics.decoder_phase_pauses++;
        continue;
      }
      ++ended;
      try {
        EndPrefill(*fin[i], std::move(*res[i]));
      } catch (const std::exception& e) {
        Fail(*fin[i], ErrorKind::kInternal, e.what());
      }
    }
  }
  spdlog::debug("batched prefill step: {} turns, {} rows in {} encode passes, {} decoder phases ({} ended)", plan.size(), rows,
                passes, fin.size(), ended);
}

}  // namespace cedar::session
