#include "server/server_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/version.h"

namespace cedar::server {
namespace {

// Integral values (every counter, byte gauges) print exactly as integers: "%.10g" would print
// 12345678901 as 1.23456789e+10. Others keep 10 significant digits.
std::string Num(double x) {
  char buf[64];
  if (x == std::floor(x) && std::fabs(x) < 9.0e15) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

// A label value with Prometheus' escapes (backslash, quote, newline).
std::string LabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Head(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void Line(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ' + Num(value) + '\n';
}

void Metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  Head(out, name, type, help);
  Line(out, name, "", value);
}

}  // namespace

void Histogram::Observe(double seconds) {
  const size_t b = size_t(std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());
  counts_[b]++;
  sum_ += seconds;
  count_++;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string& out) const {
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < kBounds.size() ? Num(kBounds[i]) : "+Inf";
    Line(out, name + "_bucket", sep + "le=\"" + le + "\"", double(cumulative));
  }
  Line(out, name + "_sum", labels, sum_);
  Line(out, name + "_count", labels, double(count_));
}

void ServerMetrics::Request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  requests_[{route, status}]++;
  durations_[route].Observe(seconds);
  totals_.requests++;
}

void ServerMetrics::Turn(const session::TurnAccounting& a, int64_t completion_tokens, const std::string& finish_reason) {
  std::lock_guard<std::mutex> lk(mu_);
  totals_.turns++;
  totals_.prompt_tokens += a.prompt_tokens;
  totals_.cached_tokens += a.cached_tokens();
  totals_.completion_tokens += completion_tokens;
  finish_reasons_[finish_reason]++;
  ttft_.Observe(a.ttft_ms / 1000.0);
  turn_total_.Observe(a.total_ms / 1000.0);
}

void ServerMetrics::InterTokenGaps(const std::vector<float>& seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  for (float g : seconds) inter_token_.Observe(double(g));
}

void ServerMetrics::Connection(int delta) {
  std::lock_guard<std::mutex> lk(mu_);
  totals_.connections_open += delta;
  if (delta > 0) totals_.connections_total += delta;
}

void ServerMetrics::Replays(int exact, int canonical) {
  std::lock_guard<std::mutex> lk(mu_);
  totals_.replay_exact += exact;
  totals_.replay_canonical += canonical;
}

ServerMetrics::Totals ServerMetrics::totals() const {
  std::lock_guard<std::mutex> lk(mu_);
  return totals_;
}

std::string ServerMetrics::Render(const session::EngineMetrics& e) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Head(out, "cedar_http_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (const auto& [key, n] : requests_) {
      Line(out, "cedar_http_requests_total", "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"",
           double(n));
    }
    Head(out, "cedar_http_request_duration_seconds", "histogram",
         "Time from a request's arrival to the end of its response (streams included).");
    for (const auto& [route, h] : durations_) h.Render("cedar_http_request_duration_seconds", "route=\"" + route + "\"", out);
    Metric(out, "cedar_http_connections_open", "gauge", "Open client connections.", double(totals_.connections_open));
    Metric(out, "cedar_http_connections_total", "counter", "Client connections accepted.",
           double(totals_.connections_total));
    Metric(out, "cedar_replay_exact_total", "counter",
           "Assistant messages of chat requests rendered as the exact ids the model sampled.",
           double(totals_.replay_exact));
    Metric(out, "cedar_replay_canonical_total", "counter",
           "Assistant messages of chat requests re-rendered canonically (edited, scripted or not remembered).",
           double(totals_.replay_canonical));
    Metric(out, "cedar_server_turns_total", "counter", "Turns the server answered (the usage it returned).",
           double(totals_.turns));
    Metric(out, "cedar_server_prompt_tokens_total", "counter", "usage.prompt_tokens summed over answered turns.",
           double(totals_.prompt_tokens));
    Metric(out, "cedar_server_cached_tokens_total", "counter",
           "usage.prompt_tokens_details.cached_tokens summed over answered turns.", double(totals_.cached_tokens));
    Metric(out, "cedar_server_completion_tokens_total", "counter", "usage.completion_tokens summed over answered turns.",
           double(totals_.completion_tokens));
    Head(out, "cedar_server_finish_reasons_total", "counter", "Answered turns by finish_reason.");
    for (const auto& [reason, n] : finish_reasons_) Line(out, "cedar_server_finish_reasons_total", "reason=\"" + reason + "\"", double(n));
    Head(out, "cedar_time_to_first_token_seconds", "histogram", "Submit to first token, per answered turn.");
    ttft_.Render("cedar_time_to_first_token_seconds", "", out);
    Head(out, "cedar_turn_duration_seconds", "histogram", "Submit to end of turn in the session manager.");
    turn_total_.Render("cedar_turn_duration_seconds", "", out);
    Head(out, "cedar_inter_token_latency_seconds", "histogram",
         "Time between consecutive generated tokens of a turn, as the server received them.");
    inter_token_.Render("cedar_inter_token_latency_seconds", "", out);
  }
  Head(out, "cedar_build_info", "gauge", "Always 1; the labels name the build.");
  Line(out, "cedar_build_info",
       "version=\"" + LabelValue(kCedarVersion) + "\",git=\"" + LabelValue(kCedarGitDescribe) + "\"", 1);
  Metric(out, "cedar_running_turns", "gauge", "Admitted turns (prefilling or decoding).",
         double(e.prefilling_turns + e.decoding_turns));
  Metric(out, "cedar_waiting_turns", "gauge", "Turns waiting for admission (as cedar_queue_turns).", double(e.queued_turns));
  Head(out, "cedar_cache_usage_ratio", "gauge", "Bytes held over the byte budget of the prefix cache, by tier (0 without a budget).");
  Line(out, "cedar_cache_usage_ratio", "tier=\"ram\"", e.ram_budget ? double(e.ram_bytes) / double(e.ram_budget) : 0.0);
  Line(out, "cedar_cache_usage_ratio", "tier=\"disk\"", e.disk_budget ? double(e.disk_bytes) / double(e.disk_budget) : 0.0);
  Metric(out, "cedar_turns_total", "counter", "Turns the engine finished.", double(e.turns));
  Metric(out, "cedar_turns_cancelled_total", "counter", "Turns cancelled (client gone, stop string, shutdown).",
         double(e.turns_cancelled));
  Metric(out, "cedar_turns_failed_total", "counter", "Turns refused or failed in the engine.", double(e.turns_failed));
  Metric(out, "cedar_prompt_tokens_total", "counter", "Prompt tokens of finished turns.", double(e.prompt_tokens));
  Metric(out, "cedar_generated_tokens_total", "counter", "Tokens generated.", double(e.generated_tokens));
  Head(out, "cedar_cache_hit_tokens_total", "counter", "Prompt tokens served without encoding, by tier.");
  Line(out, "cedar_cache_hit_tokens_total", "tier=\"live\"", double(e.hit_tokens_live));
  Line(out, "cedar_cache_hit_tokens_total", "tier=\"ram\"", double(e.hit_tokens_ram));
  Line(out, "cedar_cache_hit_tokens_total", "tier=\"disk\"", double(e.hit_tokens_disk));
  Line(out, "cedar_cache_hit_tokens_total", "tier=\"remote\"", double(e.hit_tokens_remote));
  if (e.remote_enabled) {  // the shared tier (--cache-remote): faults are misses, counted here
    const cache::RemoteStats& r = e.remote;
    Metric(out, "cedar_remote_connected", "gauge", "1 when the last remote read found Redis reachable.", r.connected ? 1 : 0);
    Metric(out, "cedar_remote_reads_total", "counter", "Remote lookups that reached Redis.", double(r.reads));
    Metric(out, "cedar_remote_page_hits_total", "counter", "Pages read from the remote tier (verified).", double(r.page_hits));
    Metric(out, "cedar_remote_page_misses_total", "counter", "Remote lookups whose first page was absent.", double(r.page_misses));
    Metric(out, "cedar_remote_snapshot_hits_total", "counter", "Snapshots read from the remote tier (verified).",
           double(r.snapshot_hits));
    Head(out, "cedar_remote_faults_total", "counter", "Remote reads that became misses, by cause.");
    Line(out, "cedar_remote_faults_total", "cause=\"corrupt\"", double(r.corrupt));
    Line(out, "cedar_remote_faults_total", "cause=\"timeout\"", double(r.timeouts));
    Line(out, "cedar_remote_faults_total", "cause=\"error\"", double(r.errors));
    Line(out, "cedar_remote_faults_total", "cause=\"backoff\"", double(r.skipped));
    Metric(out, "cedar_remote_outages_total", "counter", "Remote outages (each logged once).", double(r.outages));
    Metric(out, "cedar_remote_reconnects_total", "counter", "Connections made again after an outage.", double(r.reconnects));
    Head(out, "cedar_remote_writes_total", "counter", "Remote entries written, by kind and outcome.");
    Line(out, "cedar_remote_writes_total", "kind=\"page\",outcome=\"written\"", double(r.pages_written));
    Line(out, "cedar_remote_writes_total", "kind=\"snapshot\",outcome=\"written\"", double(r.snapshots_written));
    Line(out, "cedar_remote_writes_total", "kind=\"any\",outcome=\"refreshed\"", double(r.refreshed));
    Line(out, "cedar_remote_writes_total", "kind=\"any\",outcome=\"refused\"", double(r.write_failures));
    Line(out, "cedar_remote_writes_total", "kind=\"any\",outcome=\"dropped\"", double(r.writes_dropped));
    Metric(out, "cedar_remote_queued_bytes", "gauge", "Bytes waiting for the remote writer thread.", double(r.queued_bytes));
  }
  Metric(out, "cedar_encoder_replays_total", "counter", "Encoder SWA Bounded Replays (snapshot missing).",
         double(e.encoder_replays));
  Metric(out, "cedar_encoder_replay_rows_total", "counter", "Rows recomputed by encoder replays.",
         double(e.encoder_replay_rows));
  Metric(out, "cedar_exact_restores_total", "counter", "Exact encoder restores (snapshot missing, staircase policy).",
         double(e.exact_restores));
  Metric(out, "cedar_exact_restore_rows_total", "counter", "Rows recomputed by exact encoder restores.",
         double(e.exact_restore_rows));
  Metric(out, "cedar_decoder_replays_total", "counter", "Decoder SWA Bounded Replays.", double(e.decoder_replays));
  Metric(out, "cedar_layer_token_units_total", "counter", "Work done, in layer-token units.", double(e.layer_token_units));
  // The scheduler (issue 14).
  Metric(out, "cedar_queue_turns", "gauge", "Turns submitted and waiting for admission.", double(e.queued_turns));
  Metric(out, "cedar_prefilling_turns", "gauge", "Admitted turns with prompt rows still to run.", double(e.prefilling_turns));
  Metric(out, "cedar_decoding_turns", "gauge", "Turns generating tokens.", double(e.decoding_turns));
  Metric(out, "cedar_queue_admitted_total", "counter", "Turns that left the queue.", double(e.turns_admitted));
  Metric(out, "cedar_queue_wait_seconds_total", "counter", "Submit-to-admission time summed over admitted turns.",
         e.queue_wait_ms_total / 1000.0);
  Metric(out, "cedar_queue_wait_seconds_max", "gauge", "The longest submit-to-admission wait so far.",
         e.queue_wait_ms_max / 1000.0);
  Metric(out, "cedar_queue_full_total", "counter", "Turns refused with 429 past --max-queued-turns.",
         double(e.turns_queue_full));
  Metric(out, "cedar_memory_waits_total", "counter", "Turns whose admission waited for session memory.",
         double(e.memory_waits));
  Metric(out, "cedar_steps_total", "counter", "Mixed-scheduler steps that ran rows.", double(e.steps));
  Metric(out, "cedar_step_prefill_rows_total", "counter", "Prompt rows encoded by mixed steps.", double(e.step_prefill_rows));
  Metric(out, "cedar_step_decode_rows_total", "counter", "Decode rows run by mixed steps.", double(e.step_decode_rows));
  // Batched prefill (--batch-prefill): passes that ran several turns' chunks (or decoder phases)
  // in one product, and the decode rows that rode in them.
  Metric(out, "cedar_prefill_batches_total", "counter", "Batched prefill passes (--batch-prefill): encode or decoder phase.",
         double(e.prefill_batches));
  Metric(out, "cedar_prefill_batch_turns_max", "gauge", "The most turns in one batched prefill pass so far.",
         double(e.prefill_batch_turns_max));
  Metric(out, "cedar_decode_rows_in_prefill_total", "counter", "Decode rows that rode in a batched prefill pass.",
         double(e.decode_rows_in_prefill));
  Metric(out, "cedar_decoder_phase_pauses_total", "counter",
         "Steps that ended with a turn's decoder phase between two layers (the phase runs in parts).",
         double(e.decoder_phase_pauses));
  // Speculative decoding (--spec-tokens): the acceptance rate is accepted / drafted.
  Metric(out, "cedar_spec_passes_total", "counter", "Speculative verify passes of decoding turns.", double(e.spec_passes));
  Metric(out, "cedar_spec_drafted_total", "counter", "Draft tokens verified by speculative passes.", double(e.spec_drafted));
  Metric(out, "cedar_spec_accepted_total", "counter", "Draft tokens accepted (produced without a decode step of their own).",
         double(e.spec_accepted));
  Metric(out, "cedar_sessions", "gauge", "Sessions open.", double(e.sessions));
  Metric(out, "cedar_sessions_max", "gauge", "--max-sessions: sessions at most, live or demoted.", double(e.max_sessions));
  Metric(out, "cedar_live_sessions", "gauge", "Sessions holding a live state.", double(e.live_sessions));
  Metric(out, "cedar_session_live_state_bytes", "gauge", "Bytes of live states (idle sessions and turns in flight).",
         double(e.live_state_bytes));
  Metric(out, "cedar_session_pinned_bytes", "gauge", "Prefix-cache RAM pinned by sessions (part of the cache's RAM).",
         double(e.session_pinned_bytes));
  Metric(out, "cedar_session_ram_budget_bytes", "gauge", "--session-ram: live state bytes plus pinned bytes stay under it.",
         double(e.session_ram_budget));
  Metric(out, "cedar_sessions_demoted_total", "counter", "Live states demoted into the cache to respect --session-ram.",
         double(e.sessions_demoted));
  Metric(out, "cedar_cache_inserts_partial_total", "counter",
         "Cache inserts that stored less than offered: RAM held by pinned prefixes.", double(e.cache_inserts_partial));
  Metric(out, "cedar_cache_insert_refused_tokens_total", "counter", "Tokens refused by partial cache inserts.",
         double(e.cache_insert_refused_tokens));
  Head(out, "cedar_cache_bytes", "gauge", "Bytes held by the prefix cache, by tier.");
  Line(out, "cedar_cache_bytes", "tier=\"ram\"", double(e.ram_bytes));
  Line(out, "cedar_cache_bytes", "tier=\"disk\"", double(e.disk_bytes));
  Head(out, "cedar_cache_budget_bytes", "gauge", "Byte budget of the prefix cache, by tier.");
  Line(out, "cedar_cache_budget_bytes", "tier=\"ram\"", double(e.ram_budget));
  Line(out, "cedar_cache_budget_bytes", "tier=\"disk\"", double(e.disk_budget));
  Head(out, "cedar_cache_evictions_total", "counter", "Cache evictions, by kind.");
  Line(out, "cedar_cache_evictions_total", "kind=\"snapshot_dropped\"", double(e.snapshots_dropped));
  Line(out, "cedar_cache_evictions_total", "kind=\"page_spilled_to_disk\"", double(e.pages_spilled));
  Line(out, "cedar_cache_evictions_total", "kind=\"disk_entry_deleted\"", double(e.disk_entries_deleted));
  Metric(out, "cedar_cache_corrupt_entries_total", "counter", "Disk entries dropped as corrupt.",
         double(e.corrupt_entries));
  return out;
}

}  // namespace cedar::server
