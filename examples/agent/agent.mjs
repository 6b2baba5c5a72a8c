#!/usr/bin/env node
// An agent loop against `cedar serve`, written with the official `openai` npm client.
//
//   node agent.mjs --socket /run/user/1000/cedar/cedar.sock        # the Unix socket
//   node agent.mjs --base-url http://127.0.0.1:8080/v1 --api-key K # TCP
//   options: --turns N (default 5), --stream, --seed S, --max-tokens N (default 200),
//            --max-result-bytes N (default 600: the largest tool result),
//            --json (one JSON line per turn, then a summary line with /metrics and /v1/cache)
//
// It opens a session (POST /v1/sessions, pinning the system prompt and tool schemas), then
// plays N turns in which the model must call a tool: `tool_choice` is "required" or names the
// tool (alternately), with `parallel_tool_calls: false`, and the server enforces it through its
// grammar engine, so even a model with random weights makes a well-formed call (the tools'
// parameters are enums and booleans, so every call ends within a few dozen tokens). After each
// reply, sent back verbatim as every agent does, it answers each call with a tool result of a
// varied size (a dozen bytes to 600 bytes), then plays a last turn with `tool_choice: "none"`.
// Because the replies go back unchanged, the server renders each one as the exact tokens the
// model sampled (its DSML bytes, for a released-encoding model), so each turn's prompt extends
// the previous prompt + output and the session's live state serves all of it.
import OpenAI from 'openai';
import { parseArgs } from 'node:util';
import { unixSocketFetch, closeUnixSocketAgents } from './unix_fetch.mjs';

const { values: opt } = parseArgs({
  options: {
    socket: { type: 'string' },
    'base-url': { type: 'string' },
    'api-key': { type: 'string', default: process.env.CEDAR_API_KEY ?? 'unused' },
    turns: { type: 'string', default: '5' },
    seed: { type: 'string', default: '7' },
    'max-tokens': { type: 'string', default: '200' },
    'max-result-bytes': { type: 'string', default: '600' },
    stream: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
if (!opt.socket && !opt['base-url']) {
  console.error('give --socket PATH (Unix socket) or --base-url http://HOST:PORT/v1');
  process.exit(2);
}

const rawFetch = opt.socket ? unixSocketFetch(opt.socket) : fetch;
const baseURL = opt.socket ? 'http://cedar/v1' : opt['base-url'];
const client = new OpenAI({ baseURL, apiKey: opt['api-key'], fetch: rawFetch, maxRetries: 0, timeout: 300_000 });
const authHeaders = { Authorization: `Bearer ${opt['api-key']}` };

const files = ['session/session_manager.h', 'server/api.cpp', 'docs/SERVER.md', 'engine/sampling.cpp'];
const tools = [
  { type: 'function', function: { name: 'search_code', description: 'Search the repository for a symbol.',
    parameters: { type: 'object', properties: { query: { type: 'string', enum: ['SessionManager::Submit', 'kSessionBusy', 'Sampler'] } },
      required: ['query'] } } },
  { type: 'function', function: { name: 'read_file', description: 'Read a file of the repository.',
    parameters: { type: 'object', properties: { path: { type: 'string', enum: files } }, required: ['path'] } } },
  { type: 'function', function: { name: 'run_tests', description: 'Run the test suite and report failures.',
    parameters: { type: 'object', properties: { label: { type: 'string', enum: ['unit', 'model'] }, verbose: { type: 'boolean' } },
      required: ['label'] } } },
];
const system = { role: 'system', content: 'You are a coding agent. Use the tools to inspect the repository, then answer.' };

// Tool results of varied sizes (bytes), cycled turn by turn: a dozen bytes to 600 bytes (20 turns
// then fit the 4,096 positions of the tiny test models), at most --max-result-bytes.
const resultBytes = [30, 300, 12, 120, 600, 60, 200, 20, 400, 80].map((b) => Math.min(b, Number(opt['max-result-bytes'])));

// What the tool answered: deterministic text of about `bytes` bytes that names the call.
function toolResult(turn, call) {
  const head = `${call.function.name}(${call.function.arguments}) at turn ${turn}:\n`;
  const bytes = resultBytes[(turn - 1) % resultBytes.length];
  let text = head;
  for (let line = 1; text.length < bytes; ++line) text += `${line}: result line ${line} of ${call.function.name}, value ${(line * 7919) % 1000}\n`;
  return text.slice(0, Math.max(bytes, head.length));
}

// The tool_choice of a turn: "required", or the tool named (alternately, cycling the tools).
function toolChoice(turn) {
  if (turn % 2 === 1) return 'required';
  return { type: 'function', function: { name: tools[(turn / 2) % tools.length].function.name } };
}

// One model call; returns the assistant message as the client got it, with usage and cedar.
async function callModel(sessionId, messages, choice) {
  const params = {
    model: 'cedar', messages, tools, tool_choice: choice, session_id: sessionId,
    max_tokens: choice === 'none' ? 4 : Number(opt['max-tokens']), temperature: 0.8, seed: Number(opt.seed),
  };
  if (choice !== 'none') params.parallel_tool_calls = false;
  if (!opt.stream) {
    const r = await client.chat.completions.create(params);
    return { message: r.choices[0].message, finish: r.choices[0].finish_reason, usage: r.usage, cedar: r.cedar };
  }
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const message = { role: 'assistant', content: '' };
  let finish = null, usage = null, cedar = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice?.delta?.content) message.content += choice.delta.content;
    for (const d of choice?.delta?.tool_calls ?? []) {
      message.tool_calls ??= [];
      const call = (message.tool_calls[d.index] ??= { id: d.id, type: 'function', function: { name: '', arguments: '' } });
      if (d.function?.name) call.function.name = d.function.name;
      if (d.function?.arguments) call.function.arguments += d.function.arguments;
    }
    if (choice?.finish_reason) finish = choice.finish_reason;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.cedar) cedar = chunk.cedar;
  }
  if (message.tool_calls && !message.content) message.content = null;
  return { message, finish, usage, cedar };
}

function report(turn, r, previous, choice, results) {
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  const line = {
    turn, prompt_tokens: r.usage.prompt_tokens, cached_tokens: cached, completion_tokens: r.usage.completion_tokens,
    previous_context: previous, finish_reason: r.finish, text: r.message.content ?? '', tool_choice: choice,
    tool_calls: r.message.tool_calls ?? [], tool_result_bytes: results, cedar: r.cedar,
  };
  if (opt.json) {
    console.log(JSON.stringify(line));
  } else {
    const tiers = r.cedar?.cached_tokens_by_tier ?? {};
    const share = ((100 * cached) / r.usage.prompt_tokens).toFixed(1);
    const calls = (r.message.tool_calls ?? []).map((c) => `${c.function.name}(${c.function.arguments})`).join(', ');
    console.log(`turn ${turn}: prompt ${r.usage.prompt_tokens} tokens, cached ${cached} (${share}%: live ${tiers.live}, ` +
      `ram ${tiers.ram}, disk ${tiers.disk}), completion ${r.usage.completion_tokens}, ttft ${r.cedar?.ttft_ms?.toFixed(2)} ms` +
      (calls ? `, called ${calls}, results ${results.join('+')} bytes` : ''));
  }
}

async function main() {
  // A session, with the system prompt and tool schemas pinned in the cache for an hour.
  const session = await client.post('/sessions', { body: { messages: [system], tools, pin_ttl_s: 3600 } });
  const messages = [system, { role: 'user', content: 'Why does a second request on a busy session fail, and where is that handled?' }];
  const turns = Number(opt.turns);
  let previous = 0;
  for (let t = 1; t <= turns + 1; ++t) {
    const choice = t <= turns ? toolChoice(t) : 'none';
    const r = await callModel(session.id, messages, choice);
    const calls = r.message.tool_calls ?? [];
    if (choice !== 'none' && (calls.length !== 1 || r.finish !== 'tool_calls')) {
      throw new Error(`turn ${t}: tool_choice ${JSON.stringify(choice)} gave ${calls.length} tool calls, finish_reason ` +
        `${r.finish} after ${r.usage.completion_tokens} tokens, prompt ${r.usage.prompt_tokens} (raise --max-tokens if the call was cut off)`);
    }
    messages.push(r.message);  // the reply goes back unchanged
    const results = calls.map((c) => toolResult(t, c));
    calls.forEach((c, i) => messages.push({ role: 'tool', tool_call_id: c.id, content: results[i] }));
    report(t, r, previous, choice, results.map((x) => Buffer.byteLength(x)));
    previous = r.usage.prompt_tokens + r.usage.completion_tokens;
  }
  // What the server counted (Prometheus text) and its page size, for comparison with what we saw.
  const base = baseURL.endsWith('/') ? baseURL : baseURL + '/';
  const metrics = await (await rawFetch(new URL('../metrics', base).href, { headers: authHeaders })).text();
  const cache = await (await rawFetch(new URL('cache', base).href, { headers: authHeaders })).json();
  await client.delete(`/sessions/${session.id}`);
  if (opt.json) console.log(JSON.stringify({ summary: true, session: session.id, metrics, page_tokens: cache.page_tokens }));
}

main().then(closeUnixSocketAgents).catch((e) => {
  console.error(`agent: ${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`);
  closeUnixSocketAgents();
  process.exit(1);
});
