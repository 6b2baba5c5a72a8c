// The life of one turn on the engine thread: restore, prefill, decode step by step, remember.
// The engine calls go through the backend; host<->device copies happen only at a restore
// (Upload of the state built from the cache) and where the turn feeds the cache (Download).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/prefix_cache.h"
#include "cache/state_codec.h"
#include "session/manager_impl.h"

namespace cedar::session {

namespace {
double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
constexpr int kPrefillChunk = 2048;
}  // namespace

// A page of slack so the snapshot can be cut at the last page boundary; a staircase of H_E
// (plus the W - 1 rows layer E's window reaches back) so an exact decoder can be rebuilt.
void SessionManager::Impl::PrepareState(SequenceState& st) const {
  const ModelConfig& c = model->config();
  st.keep_extra_rows = int64_t(opt.page_tokens);
  st.keep_h_e_rows = c.StaircaseLength() + c.window - 1;
}

void SessionManager::Impl::PrepareState(Sequence& s) const {
  const ModelConfig& c = model->config();
  s.SetKeepRows(c.StaircaseLength() + c.window - 1, int64_t(opt.page_tokens));
}

const SequenceState& SessionManager::Impl::HostView(const Sequence& s, std::optional<SequenceState>& copy) const {
  if (const SequenceState* host = backend->HostState(s)) return *host;
  return copy.emplace(backend->Download(s));
}

std::optional<cache::SnapshotInput> SessionManager::Impl::SnapshotAt(const SequenceState& st, int64_t position,
                                                                   const cache::TailInput& tail) {
  if (position <= 0) return std::nullopt;
  const ModelConfig& c = model->config();
  auto snap = cache::EncodeSnapshot(c, st, position, st.keep_h_e_rows, tail);
  if (!snap.ok()) {
    spdlog::debug("no snapshot at {}: {}", position, snap.status().ToString());
    return std::nullopt;
  }
  return cache::SnapshotInput{size_t(position), snap.value()};
}

void SessionManager::Impl::InsertIntoCache(const SequenceState& st, std::vector<cache::SnapshotInput> snapshots,
                                           cache::TenantSalt salt, Session* owner) {
  const ModelConfig& c = model->config();
  const size_t page = opt.page_tokens;
  // Only exact state enters the cache: after an Encoder SWA Bounded Replay, pool rows past the
  // replay point and every window snapshot are approximations.
  std::span<const int32_t> tokens(st.tokens.data(), size_t(st.ExactUntil()));
  if (st.replayed) snapshots.clear();
  auto provider = [&](size_t page_index, std::span<const cache::TokenId>) -> cache::Result<cache::Payload> {
    return cache::EncodePage(c, st, int64_t(page_index * page), page);
  };
  const size_t stored = tokens.size() / page * page;
  snapshots.erase(std::remove_if(snapshots.begin(), snapshots.end(), [&](const cache::SnapshotInput& s) { return s.position > stored; }),
                  snapshots.end());
  auto r = cache->Insert(tokens, provider, snapshots, salt);
  if (!r.ok()) {
    spdlog::warn("cache insert refused: {}", r.status().ToString());
    return;
  }
  spdlog::debug("cache insert: {} cached, {} added, {} refused, {} snapshots", r->cached_tokens, r->added_tokens,
                r->refused_tokens, snapshots.size());
  if (!r->partial()) return;
  // Pinned state held the RAM: the turn's next hit will be shorter than its context. Counted
  // always, logged at info once per session (a refusal usually repeats every turn).
  metrics.cache_inserts_partial++;
  metrics.cache_insert_refused_tokens += int64_t(r->refused_tokens);
  bool& logged = owner ? owner->insert_refusal_logged : sessionless_refusal_logged;
  const std::string who = owner ? "session '" + owner->id + "'" : "a turn without a session";
  if (!logged)
    spdlog::info("prefix cache stored {} of {} tokens of {} ({} snapshots refused): its RAM is held by pinned prefixes; "
                 "counted in cedar_cache_inserts_partial_total, logged once",
                 r->stored_tokens, r->stored_tokens + r->refused_tokens, who, r->refused_snapshots.size());
  logged = true;
}

// An exact repeat: the whole prompt is cached (it ends on a page boundary) with a snapshot at
// its end whose decoder tail this turn's policy accepts. The state resumes there with the
// tail's logits and decoder windows: no row is computed. Null when that is not the case.
void SessionManager::Impl::CountTiers(TurnAccounting& a, int64_t used, const cache::MatchResult& m,
                                      const cache::RemotePull& pull) {
  a.matched_remote = std::clamp<int64_t>(std::min<int64_t>(used, int64_t(pull.end())) - int64_t(pull.from_tokens), 0, used);
  a.matched_disk = std::min<int64_t>(used - a.matched_remote, int64_t(m.disk_tokens));
  a.matched_ram = used - a.matched_disk - a.matched_remote;
}

std::unique_ptr<Sequence> SessionManager::Impl::RestoreRepeat(ActiveTurn& t, const cache::RemotePull& pull) {
  const ModelConfig& c = model->config();
  const auto& prompt = t.request.prompt;
  const size_t N = prompt.size();
  if (N % opt.page_tokens != 0) return nullptr;
  const cache::MatchResult m = cache->Match(prompt, t.request.tenant);
  if (m.matched_tokens != N || m.snapshot_position != N) return nullptr;
  auto handle = cache->Acquire(prompt, t.request.tenant);
  if (!handle.ok() || handle->tokens() != N || handle->snapshot_position() != N) return nullptr;
  // A tail equals what this turn would compute: exact windows for the exact policy, a bounded
  // replay's for the bounded one (the same when N <= W); auto takes either, as it takes a live
  // decoder when one covers the turn.
  const cache::DecoderTail tail = cache::SnapshotTail(handle->snapshot());
  const DecoderPolicy pol = t.request.decoder;
  const bool short_prompt = int64_t(N) <= c.window;
  const bool usable = tail != cache::DecoderTail::kNone &&
                      (pol == DecoderPolicy::kAuto || short_prompt ||
                       (pol == DecoderPolicy::kExact) == (tail == cache::DecoderTail::kExact));
  if (!usable) return nullptr;
  auto st = cache::StateFromPages(c, handle->pages(), opt.page_tokens, prompt);
  if (!st.ok()) return nullptr;
  SequenceState host = std::move(st).value();
  std::vector<float> logits;
  if (cache::Status applied = cache::ApplySnapshot(c, handle->snapshot(), host, &logits); !applied.ok()) {
    spdlog::warn("snapshot rejected: {}", applied.ToString());
    return nullptr;
  }
  std::unique_ptr<Sequence> out = backend->Adopt(std::move(host));
  backend->RebuildLayerEWindow(*out);
  t.logits = std::move(logits);
  t.tail_kind = tail;
  TurnAccounting& a = t.result.accounting;
  a.snapshot_hit = a.tail_hit = true;
  CountTiers(a, int64_t(N), m, pull);
  spdlog::debug("turn: exact repeat of {} tokens from the snapshot's decoder tail ({} from disk, {} from the remote tier)", N,
                a.matched_disk, a.matched_remote);
  return out;
}

// Builds the state a turn starts from: the session's live state when it is a prefix of the
// prompt; else the longest cached prefix (snapshot, or Encoder SWA Bounded Replay); else empty.
// A cached prefix is assembled on the host (the codec's format) and uploaded once.
std::unique_ptr<Sequence> SessionManager::Impl::Restore(ActiveTurn& t, Session* s) {
  const ModelConfig& c = model->config();
  const auto& prompt = t.request.prompt;
  TurnAccounting& a = t.result.accounting;
  // The shared remote tier first (nothing without one): what RAM and disk miss may have been
  // written by another server, e.g. this session's last turns when they ran there.
  const cache::RemotePull pull = cache->PullRemote(prompt, t.request.tenant);
  if (s && s->live && s->live->pos() < int64_t(prompt.size()) &&
      std::equal(s->live->tokens().begin(), s->live->tokens().end(), prompt.begin())) {
    if (pull.pulled_tokens == 0 || int64_t(pull.end()) <= s->live->pos()) {
      a.matched_live = s->live->pos();
      spdlog::debug("turn: live hit of {} tokens", a.matched_live);
      return std::move(s->live);
    }
    // The session ran elsewhere since this live state: the shared tier holds more of its context.
    spdlog::debug("turn: the remote tier reaches {} tokens, the live state {}: restoring from the cache", pull.end(),
                  s->live->pos());
  }
  if (s) s->live.reset();  // the conversation diverged (or moved on elsewhere): the live state is of no further use
  if (auto repeat = RestoreRepeat(t, pull)) return repeat;
  // Match at most prompt - 1 tokens: the last one must run to give logits.
  std::span<const int32_t> query(prompt.data(), prompt.size() - 1);
  const cache::MatchResult m = cache->Match(query, t.request.tenant);
  auto fresh = [&] { return backend->NewSequence(); };
  if (m.matched_tokens == 0) return fresh();
  auto handle = cache->Acquire(query, t.request.tenant);
  if (!handle.ok() || handle->empty()) return fresh();
  const size_t page = opt.page_tokens;
  const size_t P = handle->tokens(), S = handle->snapshot_position();
  // With a snapshot at the match end: exact. Without: the staircase restore (exact), or a replay
  // (approximate) unless exactness was asked for, then restore at the deepest snapshot and
  // encode the rest (as the recompute policy always does).
  const bool exact_needed = t.request.restore == RestorePolicy::kRecompute ||
                            (t.request.restore == RestorePolicy::kReplay && t.request.decoder == DecoderPolicy::kExact);
  size_t use = P;
  bool with_snapshot = (S == P);
  if (!with_snapshot && exact_needed) {
    use = S;
    with_snapshot = S > 0;
  }
  if (use == 0) return fresh();
  std::span<const cache::Payload> pages(handle->pages().data(), use / page);
  auto st = cache::StateFromPages(c, pages, page, prompt);
  if (!st.ok()) {
    spdlog::warn("cache restore failed: {}", st.status().ToString());
    return fresh();
  }
  SequenceState host = std::move(st).value();
  std::unique_ptr<Sequence> out;
  if (with_snapshot) {
    cache::Status applied = cache::ApplySnapshot(c, handle->snapshot(), host);
    if (!applied.ok()) {
      spdlog::warn("snapshot rejected: {}", applied.ToString());
      return fresh();
    }
    out = backend->Adopt(std::move(host));
    backend->RebuildLayerEWindow(*out);
    a.snapshot_hit = true;
  } else {
    // No snapshot at the match end: rebuild the encoder windows from the pools, exactly (the
    // staircase) or by Encoder SWA Bounded Replay.
    const bool staircase = t.request.restore == RestorePolicy::kStaircase;
    StepStats rs;
    if (staircase) PrepareState(host);  // the rows kept decide how far back the staircase reaches
    out = backend->Adopt(std::move(host));
    rs = staircase ? backend->ExactEncoderRestore(*out) : backend->EncoderReplay(*out);
    (staircase ? a.exact_restore_rows : a.encoder_replay_rows) = rs.replay_rows;
    a.layer_token_units += rs.layer_token_units;
    a.prefill_units += rs.layer_token_units;
    (staircase ? metrics.exact_restores : metrics.encoder_replays)++;
    (staircase ? metrics.exact_restore_rows : metrics.encoder_replay_rows) += rs.replay_rows;
  }
  // Tier split of what was used: remote pages are the ones the pull brought, disk pages the ones
  // Match() saw only on disk.
  const int64_t used = int64_t(use);
  CountTiers(a, used, m, pull);
  spdlog::debug("turn: cache hit {} tokens ({} from disk, {} from the remote tier), snapshot {}, replay rows {}, exact "
                "restore rows {}", used, a.matched_disk, a.matched_remote, with_snapshot, a.encoder_replay_rows,
                a.exact_restore_rows);
  return out;
}

// Validation and the state the turn starts from (live, cache or empty); decides the decoder
// policy of its prefill. False when the turn ended here (refused or failed).
bool SessionManager::Impl::BeginTurn(ActiveTurn& t) {
  const ModelConfig& c = model->config();
  TurnRequest& rq = t.request;
  TurnAccounting& a = t.result.accounting;
  Session* s = nullptr;
  if (!rq.session_id.empty()) {
    auto it = sessions.find(Key(rq.owner, rq.session_id));
    if (it == sessions.end()) return Fail(t, ErrorKind::kSessionNotFound, "unknown session '" + rq.session_id + "'"), false;
    s = &it->second;
    s->last_used = std::chrono::steady_clock::now();
  }
  if (rq.prompt.empty()) return Fail(t, ErrorKind::kInvalidRequest, "the prompt is empty"), false;
  for (int32_t tok : rq.prompt)
    if (tok < 0 || tok >= c.vocab_size)
      return Fail(t, ErrorKind::kInvalidRequest, "token " + std::to_string(tok) + " is outside the vocabulary"), false;
  if (int64_t(rq.prompt.size()) >= c.max_seq_len)
    return Fail(t, ErrorKind::kPromptTooLong, "prompt of " + std::to_string(rq.prompt.size()) + " tokens; the model's limit is " +
                                                  std::to_string(c.max_seq_len)), false;
  if (rq.max_tokens < 0) return Fail(t, ErrorKind::kInvalidRequest, "max_tokens must be >= 0"), false;
  rq.max_tokens = int(std::min<int64_t>(rq.max_tokens, c.max_seq_len - int64_t(rq.prompt.size())));
  try {
    t.state = Restore(t, s);
    Sequence& st = *t.state;
    PrepareState(st);
    const int64_t N = int64_t(rq.prompt.size()), p0 = st.pos(), fresh_rows = N - p0;
    a.prompt_tokens = N;
    a.tokens_encoded = fresh_rows;
    a.no_cache_units = N * c.n_layers;
    t.encode_next = p0;
    backend->Reserve(st, fresh_rows);  // no reallocation mid-prompt (SequenceState::Reserve)
    if (fresh_rows > 0) {
      const bool live_decoder = st.decoder_pos() == p0 && p0 > 0;
      if (rq.decoder == DecoderPolicy::kExact || (live_decoder && fresh_rows <= c.window && rq.decoder == DecoderPolicy::kAuto))
        t.mode = PrefillMode::kExact;
      else
        t.mode = PrefillMode::kBounded;
      if (p0 == 0 && rq.decoder == DecoderPolicy::kAuto && N <= c.window) t.mode = PrefillMode::kExact;
    }
    // A speculating turn's prefill keeps the rows its drafter reads, so that the first drafts
    // see the prompt (as `cedar generate --spec-tokens` does).
    if (Speculates(t)) t.spec_capture = PrefillCaptureFor(*model, *t.drafter);
    return true;
  } catch (const std::exception& e) {
    Fail(t, ErrorKind::kInternal, e.what());
    return false;
  }
}

// The serial scheduler: the whole prefill at once (chunks of kPrefillChunk, back to back).
void SessionManager::Impl::StartTurn(ActiveTurn& t) {
  if (!BeginTurn(t)) return;
  try {
    const int64_t N = int64_t(t.request.prompt.size()), p0 = t.state->pos();
    std::optional<PrefillResult> pr;
    if (N > p0) {
      PrefillOptions po;
      po.chunk_size = kPrefillChunk;
      po.mode = t.mode;
      if (t.speculating) po.hidden = &t.spec_capture;
      pr = backend->Prefill(*t.state, std::span<const int32_t>(t.request.prompt.data() + p0, size_t(N - p0)), po);
    }
    EndPrefill(t, std::move(pr));
  } catch (const std::exception& e) {
    Fail(t, ErrorKind::kInternal, e.what());
  }
}

// After the prefill (`pr`: its result; nullopt for an exact repeat, whose logits Restore set):
// accounting, the snapshot at the prompt's end, the sampler. The turn then decodes.
void SessionManager::Impl::EndPrefill(ActiveTurn& t, std::optional<PrefillResult> pr) {
  const ModelConfig& c = model->config();
  TurnRequest& rq = t.request;
  TurnAccounting& a = t.result.accounting;
  Sequence& st = *t.state;
  const int64_t N = int64_t(rq.prompt.size());
  const int64_t fresh_rows = a.tokens_encoded;
  if (t.speculating) {
    if (pr) ObservePrefill(*t.drafter, t.spec_capture);  // an exact repeat ran nothing: no rows
    t.spec_capture = HiddenCapture{};
  }
  if (pr) {
    if (t.mode == PrefillMode::kBounded && N > c.window) metrics.decoder_replays++;
    // A bounded replay of N <= W rows is the exact computation.
    t.tail_kind = t.mode == PrefillMode::kExact || N <= c.window ? cache::DecoderTail::kExact : cache::DecoderTail::kBounded;
    a.decoder_rows = pr->stats.decoder_rows;
    a.prefill_units += pr->stats.layer_token_units;
    a.layer_token_units += pr->stats.layer_token_units;
    t.logits = std::move(pr->logits);
  }  // else an exact repeat: Restore set the logits and the tail kind
  const int64_t matched = a.matched_live + a.matched_ram + a.matched_disk;
  a.decoder_only_cached_units = (N - matched) * c.n_layers;
  if (rq.return_prompt_logits) t.result.prompt_logits = t.logits;
  // The snapshot at the prompt's last page boundary must be cut now: decoding moves the
  // windows past it. With nothing to decode, Finish cuts the same one from the same state
  // (so a device downloads once). Cut at the prompt's very end, it carries the decoder tail
  // (an exact repeat of this prompt then computes nothing); a repeat has it already.
  const int64_t boundary = N / int64_t(opt.page_tokens) * int64_t(opt.page_tokens);
  if (rq.max_tokens > 0 && boundary > 0 && fresh_rows > 0) {
    std::optional<SequenceState> copy;
    cache::TailInput tail;
    if (boundary == N) tail = {t.tail_kind, t.logits};
    if (auto snap = SnapshotAt(HostView(st, copy), boundary, tail)) t.snapshots.push_back(*snap);
  }
  EnforceSessionBudget();  // the turn's state now counts: idle sessions make room
  if (st.pos() > 0) state_bytes_per_token = double(st.Bytes()) / double(st.pos());
  t.sampler.emplace(rq.sampling);
  t.phase = ActiveTurn::Phase::kDecoding;
  if (rq.max_tokens == 0) {
    a.ttft_ms = Ms(t.submitted, std::chrono::steady_clock::now());
    Finish(t, "length");
  }
}

// The logits to sample from: the model's, adjusted by the request's logit_bias and penalties
// (engine/logprobs.h), then masked by its logits processor (the grammar hook, issue 19). A copy
// when either applies: t.logits stays the model's, which the cache may keep as the decoder tail
// and logprobs report. nullptr when the processor allows no token.
static const std::vector<float>* ConstrainLogits(ActiveTurn& t) {
  const bool adjust = !t.request.adjust.empty();
  if (!t.request.logits_processor && !adjust) return &t.logits;
  t.masked_logits = t.logits;
  if (adjust) ApplyAdjustments(t.request.adjust, t.counts, t.masked_logits);
  if (!t.request.logits_processor) return &t.masked_logits;
  return t.request.logits_processor->Process(t.masked_logits) ? &t.masked_logits : nullptr;
}

bool SessionManager::Impl::Sample(ActiveTurn& t) {
  TurnRequest& rq = t.request;
  int32_t tok;
  if (Speculates(t)) {
    tok = SpeculativeToken(t);  // no processor or adjustment applies to a speculating turn
  } else {
    const std::vector<float>* logits = ConstrainLogits(t);
    if (!logits) return Finish(t, "stop"), false;
    tok = t.sampler->Sample(*logits);
    if (rq.logits_processor) rq.logits_processor->Accept(tok);
  }
  if (const char* reason = Produce(t, tok)) return Finish(t, reason), false;
  return true;
}

const char* SessionManager::Impl::Produce(ActiveTurn& t, int32_t tok) {
  TurnRequest& rq = t.request;
  t.result.output.push_back(tok);
  t.counts[tok]++;
  if (rq.top_logprobs >= 0) {
    t.result.logprobs.push_back(LogprobsOf(t.logits, tok, rq.top_logprobs));
    if (rq.on_logprobs) rq.on_logprobs(t.result.logprobs.back());
  }
  if (!t.first_token_seen) {
    t.first_token_seen = true;
    t.result.accounting.ttft_ms = Ms(t.submitted, std::chrono::steady_clock::now());
  }
  if (rq.on_token && !rq.on_token(tok)) return "cancelled";
  if (std::find(rq.stop_tokens.begin(), rq.stop_tokens.end(), tok) != rq.stop_tokens.end()) return "stop";
  if (int(t.result.output.size()) >= rq.max_tokens) return "length";
  return nullptr;
}

void SessionManager::Impl::StepAll() {
  // Every turn samples its next token; those that go on decode it together in one batch.
  std::vector<ActiveTurn*> going;
  for (ActiveTurn& t : active)
    if (!t.done && Sample(t)) going.push_back(&t);
  DecodeRows(going);
}

namespace {
uint64_t Fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
}  // namespace

void SessionManager::Impl::Finish(ActiveTurn& t, const std::string& reason) {
  t.done = true;
  t.result.finish_reason = reason;
  if (!t.logits.empty()) t.result.logits_hash = Fnv1a(t.logits);
  TurnAccounting& a = t.result.accounting;
  std::optional<SequenceState> copy;
  const SequenceState& st = HostView(*t.state, copy);  // the one Download of a turn's end
  // Remember: pages of everything consumed, snapshots at the prompt's and the output's ends.
  std::vector<cache::SnapshotInput> snaps = std::move(t.snapshots);
  const int64_t end = st.pos / int64_t(opt.page_tokens) * int64_t(opt.page_tokens);
  // After decode steps the windows stay exact only above an exact prefill; a bounded replay's
  // windows plus decode steps equal no fresh computation, so they carry no tail.
  const bool decoded = st.pos > t.result.accounting.prompt_tokens;
  const cache::DecoderTail kind = decoded && t.tail_kind != cache::DecoderTail::kExact ? cache::DecoderTail::kNone : t.tail_kind;
  cache::TailInput tail;
  if (end == st.pos && st.decoder_pos == st.pos && !t.logits.empty()) tail = {kind, t.logits};
  // An exact repeat resumed from the snapshot at the prompt's end: it is cached already, with
  // its tail (a new cut at the same position could not carry one once decoding started).
  const bool have_end = !snaps.empty() ? int64_t(snaps.back().position) == end
                                       : t.result.accounting.tail_hit && end == t.result.accounting.prompt_tokens;
  if (!have_end)
    if (auto snap = SnapshotAt(st, end, tail)) snaps.push_back(*snap);
  auto owner = t.request.session_id.empty() ? sessions.end() : sessions.find(Key(t.request.owner, t.request.session_id));
  InsertIntoCache(st, std::move(snaps), t.request.tenant, owner == sessions.end() ? nullptr : &owner->second);
  if (!t.request.session_id.empty()) {
    auto it = owner;
    if (it != sessions.end()) {
      it->second.prefix.Release();
      auto pinned = cache->Acquire(std::span<const int32_t>(st.tokens.data(), size_t(st.ExactUntil())), t.request.tenant);
      if (pinned.ok()) it->second.prefix = std::move(pinned).value();
      it->second.live = std::move(t.state);
      it->second.live_salt = t.request.tenant;
      it->second.turns++;
      it->second.last_used = std::chrono::steady_clock::now();
    }
    std::lock_guard<std::mutex> lk(mu);
    busy.erase(Key(t.request.owner, t.request.session_id));
  }
  t.state.reset();
  metrics.turns++;
  if (reason == "cancelled") metrics.turns_cancelled++;
  metrics.prompt_tokens += a.prompt_tokens;
  metrics.generated_tokens += int64_t(t.result.output.size());
  metrics.hit_tokens_live += a.matched_live;
  metrics.hit_tokens_ram += a.matched_ram;
  metrics.hit_tokens_disk += a.matched_disk;
  metrics.hit_tokens_remote += a.matched_remote;
  metrics.layer_token_units += a.layer_token_units;
  EnforceSessionBudget();
  a.total_ms = Ms(t.submitted, std::chrono::steady_clock::now());  // the cache insert included
  spdlog::debug("turn done: {} tokens, {} ({:.1f} ms)", t.result.output.size(), reason, a.total_ms);
  PublishStats();  // whoever waits for this turn then reads its counters in Metrics()
  t.promise.set_value(std::move(t.result));
}

void SessionManager::Impl::Fail(ActiveTurn& t, ErrorKind kind, const std::string& message) {
  t.done = true;
  t.result.finish_reason = "error";
  t.result.error_kind = kind;
  t.result.error = message;
  t.state.reset();
  metrics.turns_failed++;
  if (!t.request.session_id.empty()) {
    std::lock_guard<std::mutex> lk(mu);
    busy.erase(Key(t.request.owner, t.request.session_id));
  }
  PublishStats();
  t.promise.set_value(std::move(t.result));
}

}  // namespace cedar::session
