#!/usr/bin/env node
// An agent loop against `cedar serve`, written with the official `openai` npm client.
//
//   node agent.mjs --socket /run/user/1000/cedar/cedar.sock        # the Unix socket
//   node agent.mjs --base-url http://127.0.0.1:8080/v1 --api-key K # TCP
//   options: --turns N (default 5), --stream, --seed S, --max-tokens N, --json (one JSON line per turn)
//
// It opens a session (POST /v1/sessions, pinning the system prompt and tool schemas), then
// plays turns of tool calls and tool results, calling the model every turn and printing how
// much of each prompt came from the cache. The tiny random test model never emits a real tool
// call, so after each reply (sent back verbatim, as every agent does) the script adds the call
// a real model would have made, and the tool's result; with a real model, use its
// `tool_calls`. Because the reply goes back unchanged, the server reattaches the exact ids it
// generated, and each turn's prompt extends the previous prompt + output: the session's live
// state serves all of it.
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
    'max-tokens': { type: 'string', default: '16' },
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
const client = new OpenAI({ baseURL, apiKey: opt['api-key'], fetch: rawFetch, maxRetries: 0, timeout: 120_000 });
const authHeaders = { Authorization: `Bearer ${opt['api-key']}` };

const tools = [
  { type: 'function', function: { name: 'search_code', description: 'Search the repository for a string.',
    parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } } },
  { type: 'function', function: { name: 'read_file', description: 'Read a file of the repository.',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
  { type: 'function', function: { name: 'run_tests', description: 'Run the test suite and report failures.',
    parameters: { type: 'object', properties: { label: { type: 'string' } } } } },
];
const system = { role: 'system', content: 'You are a coding agent. Use the tools to inspect the repository, then answer.' };

// What a real model would have called, turn by turn, and what the tools answered.
const script = [
  ['search_code', { query: 'SessionManager::Submit' }, 'session/session_manager.cpp:94: std::future<TurnResult> SessionManager::Submit(...)'],
  ['read_file', { path: 'session/session_manager.h' }, '// Sessions and the engine loop. One thread owns the model...'],
  ['run_tests', { label: 'unit' }, '100% tests passed, 0 tests failed out of 9'],
  ['search_code', { query: 'kSessionBusy' }, 'server/api_error.cpp:24: case ErrorKind::kSessionBusy:'],
  ['read_file', { path: 'docs/SERVER.md' }, '# cedar serve ... (the server documentation)'],
];

// One model call; returns the assistant message as the client got it, with usage and cedar.
async function callModel(sessionId, messages) {
  const params = {
    model: 'cedar', messages, tools, tool_choice: 'auto', session_id: sessionId,
    max_tokens: Number(opt['max-tokens']), temperature: 0.8, seed: Number(opt.seed),
  };
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

function report(turn, r, previous) {
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  const line = {
    turn, prompt_tokens: r.usage.prompt_tokens, cached_tokens: cached, completion_tokens: r.usage.completion_tokens,
    previous_context: previous, finish_reason: r.finish, text: r.message.content ?? '',
    tool_calls: r.message.tool_calls ?? [], cedar: r.cedar,
  };
  if (opt.json) {
    console.log(JSON.stringify(line));
  } else {
    const tiers = r.cedar?.cached_tokens_by_tier ?? {};
    const share = ((100 * cached) / r.usage.prompt_tokens).toFixed(1);
    console.log(`turn ${turn}: prompt ${r.usage.prompt_tokens} tokens, cached ${cached} (${share}%: live ${tiers.live}, ` +
      `ram ${tiers.ram}, disk ${tiers.disk}), completion ${r.usage.completion_tokens}, ttft ${r.cedar?.ttft_ms?.toFixed(2)} ms`);
  }
}

async function main() {
  // A session, with the system prompt and tool schemas pinned in the cache for an hour.
  const session = await client.post('/sessions', { body: { messages: [system], tools, pin_ttl_s: 3600 } });
  const messages = [system, { role: 'user', content: 'Why does a second request on a busy session fail, and where is that handled?' }];
  const turns = Math.min(Number(opt.turns), script.length);
  let previous = 0;
  for (let t = 0; t < turns; ++t) {
    const r = await callModel(session.id, messages);
    report(t + 1, r, previous);
    previous = r.usage.prompt_tokens + r.usage.completion_tokens;
    messages.push(r.message);  // the reply goes back unchanged
    const [name, args, result] = script[t];
    const id = `call_${t}`;
    messages.push({ role: 'assistant', content: null,
      tool_calls: [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }] });
    messages.push({ role: 'tool', tool_call_id: id, content: result });
  }
  const last = await callModel(session.id, messages);
  report(turns + 1, last, previous);
  // What the server counted (Prometheus text), for comparison with what we saw.
  const metricsUrl = new URL('../metrics', baseURL.endsWith('/') ? baseURL : baseURL + '/');
  const metrics = await (await rawFetch(metricsUrl.href, { headers: authHeaders })).text();
  await client.delete(`/sessions/${session.id}`);
  if (opt.json) console.log(JSON.stringify({ summary: true, session: session.id, metrics }));
}

main().then(closeUnixSocketAgents).catch((e) => {
  console.error(`agent: ${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`);
  closeUnixSocketAgents();
  process.exit(1);
});
