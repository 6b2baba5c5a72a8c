// Checks two runs of examples/agent/agent.mjs --json (one whole, one streamed; each against a
// fresh server): usage and cached tokens turn by turn against the server's page size, the tool
// calls the grammar forced, the server's /metrics against the client's sums (exact replays
// included), and that both runs produced the same text.
//   node check_runs.mjs whole.jsonl streamed.jsonl [TOOL_TURNS]
// TOOL_TURNS: the agent's --turns (each run must have that many tool turns + the last one).
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
  if (!(summary.page_tokens > 0)) throw new Error(`${path}: the summary has no page_tokens from GET /v1/cache`);
  return { path, turns, metrics: parseProm(summary.metrics), page: summary.page_tokens };
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
  const { path, turns, metrics, page } = run;
  const sum = (f) => turns.reduce((a, t) => a + f(t), 0);
  if (toolTurns !== null) check(turns.length === toolTurns + 1, `${path}: ${turns.length} turns, expected ${toolTurns} + 1`);
  turns.forEach((t, i) => {
    check(t.prompt_tokens > 0 && t.completion_tokens > 0, `${path} turn ${t.turn}: usage present`);
    // The grammar forced the calls: one per tool turn (parallel_tool_calls false), of the tool
    // named when tool_choice named one; none on the last turn (tool_choice "none").
    if (t.tool_choice === 'none') {
      check(t.tool_calls.length === 0, `${path} turn ${t.turn}: tool_choice none, got ${t.tool_calls.length} calls`);
    } else {
      check(t.tool_calls.length === 1 && t.finish_reason === 'tool_calls',
        `${path} turn ${t.turn}: ${t.tool_calls.length} tool calls, finish_reason ${t.finish_reason}`);
      if (typeof t.tool_choice === 'object') {
        check(t.tool_calls[0]?.function.name === t.tool_choice.function.name,
          `${path} turn ${t.turn}: called ${t.tool_calls[0]?.function.name}, tool_choice named ${t.tool_choice.function.name}`);
      }
      for (const c of t.tool_calls) {
        let args = null;
        try { args = JSON.parse(c.function.arguments); } catch { /* checked below */ }
        check(args !== null && typeof args === 'object', `${path} turn ${t.turn}: arguments ${c.function.arguments} are not a JSON object`);
      }
    }
    if (i === 0) return;
    // The issue's property: the previous prompt + output is served from the cache but for at
    // most one partial page of the server's page size (the last sampled token was never
    // consumed, so the bound is on previous - 1).
    const floor = Math.floor((t.previous_context - 1) / page) * page;
    check(t.cached_tokens >= floor,
      `${path} turn ${t.turn}: cached ${t.cached_tokens} < ${floor} (previous context ${t.previous_context} - 1, down to a ${page}-token page)`);
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
    // Every assistant message sent back is the model's reply unchanged: rendered as its exact
    // sampled ids every time (turn k sends back k - 1 of them), never re-rendered.
    cedar_replay_exact_total: (turns.length * (turns.length - 1)) / 2,
    cedar_replay_canonical_total: 0,
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

const [wholePath, streamedPath, turnsArg] = process.argv.slice(2);
const toolTurns = turnsArg === undefined ? null : Number(turnsArg);
const [whole, streamed] = [wholePath, streamedPath].map(load);
const sizes = new Set(whole.turns.flatMap((t) => t.tool_result_bytes ?? []));
check(toolTurns === null || toolTurns < 10 || sizes.size >= 8, `tool results of varied sizes: ${[...sizes]}`);
checkRun(whole);
checkRun(streamed);
check(whole.turns.length === streamed.turns.length, 'both runs played the same number of turns');
// The two runs are the same conversation with the same seed, against servers that schedule it
// differently (agent_e2e.sh): every turn's prompt, text, tool calls (their ids included: the
// server derives them from the prompt and the seed, and Cedar's own chat format renders them
// into the next prompt), finish reason and lengths must agree.
whole.turns.forEach((w, i) => {
  const s = streamed.turns[i];
  if (!s) return;
  for (const k of ['prompt_tokens', 'cached_tokens']) check(w[k] === s[k], `turn ${w.turn}: ${k} ${s[k]} != ${w[k]}`);
  check(w.text === s.text, `turn ${w.turn}: streamed text ${JSON.stringify(s.text)} != whole ${JSON.stringify(w.text)}`);
  const calls = (t) => JSON.stringify(t.tool_calls.map((c) => [c.id, c.function.name, c.function.arguments]));
  check(calls(w) === calls(s), `turn ${w.turn}: tool calls differ: streamed ${calls(s)}, whole ${calls(w)}`);
  check(w.finish_reason === s.finish_reason, `turn ${w.turn}: finish_reason ${s.finish_reason} != ${w.finish_reason}`);
  check(w.completion_tokens === s.completion_tokens, `turn ${w.turn}: completion_tokens ${s.completion_tokens} != ${w.completion_tokens}`);
});
for (const run of [whole, streamed]) {
  for (const t of run.turns) {
    const share = ((100 * t.cached_tokens) / t.prompt_tokens).toFixed(1);
    const calls = t.tool_calls.map((c) => `${c.function.name}(${c.function.arguments})`).join(', ');
    console.log(`${run === whole ? 'whole   ' : 'streamed'} turn ${t.turn}: prompt ${t.prompt_tokens}, cached ${t.cached_tokens} ` +
      `(${share}%), completion ${t.completion_tokens}${calls ? `, ${calls} -> ${t.tool_result_bytes.join('+')} bytes` : ''}`);
  }
}
if (failures) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log(`all checks passed (page size ${whole.page} tokens)`);
