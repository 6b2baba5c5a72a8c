// Checks two runs of examples/agent/agent.mjs --json (one whole, one streamed; each against a
// fresh server): usage and cached tokens turn by turn, the server's /metrics against the
// client's sums, and that both runs produced the same text.
//   node check_runs.mjs whole.jsonl streamed.jsonl
import { readFileSync } from 'node:fs';

let failures = 0;
function check(ok, what) {
  if (!ok) {
    failures++;
    console.error(`FAIL: ${what}`);
  }
}

function load(path) {
  const lines = readFileSync(path, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  const turns = lines.filter((l) => !l.summary);
  const summary = lines.find((l) => l.summary);
  if (!summary || turns.length < 2) throw new Error(`${path}: expected turns and a summary`);
  return { path, turns, metrics: parseProm(summary.metrics) };
}

// Prometheus text -> Map("name{labels}" -> value).
function parseProm(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    m.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return m;
}

function checkRun(run) {
  const { path, turns, metrics } = run;
  const sum = (f) => turns.reduce((a, t) => a + f(t), 0);
  turns.forEach((t, i) => {
    check(t.prompt_tokens > 0 && t.completion_tokens > 0, `${path} turn ${t.turn}: usage present`);
    if (i === 0) return;
    // The previous turn's prompt and output are the start of this prompt; the model consumed
    // all of it but the last generated token, so that much is served from the cache.
    check(t.cached_tokens >= t.previous_context - 1,
      `${path} turn ${t.turn}: cached ${t.cached_tokens} < previous context ${t.previous_context} - 1`);
    check(t.cedar.cached_tokens_by_tier.live === t.cached_tokens,
      `${path} turn ${t.turn}: served by the live session (${JSON.stringify(t.cedar.cached_tokens_by_tier)})`);
  });
  const want = {
    'cedar_http_requests_total{route="/v1/chat/completions",status="200"}': turns.length,
    cedar_turns_total: turns.length,
    cedar_server_turns_total: turns.length,
    cedar_prompt_tokens_total: sum((t) => t.prompt_tokens),
    cedar_server_prompt_tokens_total: sum((t) => t.prompt_tokens),
    cedar_generated_tokens_total: sum((t) => t.completion_tokens),
    cedar_server_completion_tokens_total: sum((t) => t.completion_tokens),
    cedar_server_cached_tokens_total: sum((t) => t.cached_tokens),
  };
  for (const [name, value] of Object.entries(want)) {
    check(metrics.get(name) === value, `${path}: /metrics ${name} = ${metrics.get(name)}, the client saw ${value}`);
  }
  const tiers = ['live', 'ram', 'disk'].map((t) => metrics.get(`cedar_cache_hit_tokens_total{tier="${t}"}`));
  check(tiers.reduce((a, b) => a + b, 0) === sum((t) => t.cached_tokens),
    `${path}: cache hit tokens by tier ${tiers} do not add up to the client's cached tokens`);
  tiers.forEach((v, i) => {
    const tier = ['live', 'ram', 'disk'][i];
    check(v === sum((t) => t.cedar.cached_tokens_by_tier[tier]), `${path}: hit tokens of tier ${tier}`);
  });
}

const [whole, streamed] = process.argv.slice(2).map(load);
checkRun(whole);
checkRun(streamed);
check(whole.turns.length === streamed.turns.length, 'both runs played the same number of turns');
whole.turns.forEach((w, i) => {
  const s = streamed.turns[i];
  if (!s) return;
  check(w.text === s.text, `turn ${w.turn}: streamed text ${JSON.stringify(s.text)} != whole ${JSON.stringify(w.text)}`);
  check(JSON.stringify(w.tool_calls.map((c) => c.function)) === JSON.stringify(s.tool_calls.map((c) => c.function)),
    `turn ${w.turn}: tool calls differ`);
  check(w.finish_reason === s.finish_reason, `turn ${w.turn}: finish_reason ${s.finish_reason} != ${w.finish_reason}`);
  for (const k of ['prompt_tokens', 'completion_tokens', 'cached_tokens']) {
    check(w[k] === s[k], `turn ${w.turn}: ${k} ${s[k]} != ${w[k]}`);
  }
});
for (const run of [whole, streamed]) {
  for (const t of run.turns) {
    const share = ((100 * t.cached_tokens) / t.prompt_tokens).toFixed(1);
    console.log(`${run === whole ? 'whole   ' : 'streamed'} turn ${t.turn}: prompt ${t.prompt_tokens}, cached ${t.cached_tokens} (${share}%)`);
  }
}
if (failures) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
