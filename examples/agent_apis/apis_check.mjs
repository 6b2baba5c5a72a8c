#!/usr/bin/env node
// Cedar's Responses and Messages APIs driven by the real clients, asserting what an agent
// relies on. Run by tests/e2e/apis_e2e.sh against `cedar serve` on the tiny model:
//
//   node apis_check.mjs --socket /path/cedar.sock               # the Unix socket
//   node apis_check.mjs --base-url http://127.0.0.1:PORT --api-key K   # TCP
//
// Parts (each prints one JSON line; any failed check exits 1):
//   anthropic  @anthropic-ai/sdk: messages.create, messages.stream, a tool round trip with
//              tool_choice {type: "tool"} (streamed), on a session (X-Session-Id): the second
//              turn's cache_read_input_tokens cover the first turn's prompt and output.
//   responses  openai's responses.create: a forced function call, its output sent back with
//              previous_response_id only (cached_tokens cover the previous context), streamed.
//   aisdk      the Vercel AI SDK (@ai-sdk/openai, the Responses API): generateObject with a JSON
//              schema (jsonSchema with a validator: zod counts lengths otherwise, below),
//              generateText with a forced tool and its result (two steps); the later calls
//              report cached input tokens.
// The tiny model has random weights: its text is noise, but the forced tool calls and the
// schema-constrained object are valid because the server's grammar enforces them.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, jsonSchema, tool, stepCountIs } from 'ai';
import { parseArgs } from 'node:util';
import { unixSocketFetch, closeUnixSocketAgents } from '../agent/unix_fetch.mjs';

const { values: opt } = parseArgs({
  options: {
    socket: { type: 'string' },
    'base-url': { type: 'string' },
    'api-key': { type: 'string', default: 'unused' },
    parts: { type: 'string', default: 'anthropic,responses,aisdk' },
  },
});
if (!opt.socket && !opt['base-url']) {
  console.error('give --socket PATH or --base-url http://HOST:PORT');
  process.exit(2);
}
const fetchFn = opt.socket ? unixSocketFetch(opt.socket) : fetch;
const root = opt.socket ? 'http://cedar' : opt['base-url'];
const apiKey = opt['api-key'];

let failures = 0;
function check(cond, what, detail) {
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

// JSON Schema counts a string's maxLength in code points (RFC 8259 characters), and so does the
// server's grammar (as xgrammar's and llama.cpp's); zod's .max() counts UTF-16 code units, so a
// valid string with a character outside the BMP (an emoji) at the limit fails zod's own check.
// The AI SDK parts send JSON Schema and check it in code points.
const codePoints = (s) => [...s].length;
function checkedSchema(schema, valid) {
  return jsonSchema(schema, {
    validate: (value) => (valid(value) ? { success: true, value } : { success: false, error: new Error(`${JSON.stringify(value)} does not match ${JSON.stringify(schema)}`) }),
  });
}
const isInt = (x) => Number.isInteger(x);

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer' } },
  required: ['city'],
  additionalProperties: false,
};

async function newSession() {
  const r = await fetchFn(`${root}/v1/sessions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: '{}',
  });
  check(r.status === 200, 'POST /v1/sessions', r.status);
  return (await r.json()).id;
}

async function anthropic() {
  // x-api-key auth (the SDK sends apiKey that way).
  const client = new Anthropic({ baseURL: root, apiKey, fetch: fetchFn, maxRetries: 0 });
  const base = { model: 'cedar', max_tokens: 12, temperature: 1, seed: 3 };
  const plain = await client.messages.create({ ...base, system: 'You are terse.', messages: [{ role: 'user', content: 'hello' }] });
  check(plain.type === 'message' && plain.role === 'assistant', 'anthropic: message shape', plain);
  check(plain.content[0]?.type === 'text', 'anthropic: a text block', plain.content);
  check(['end_turn', 'max_tokens'].includes(plain.stop_reason), 'anthropic: stop_reason', plain.stop_reason);
  const streamed = await client.messages
    .stream({ ...base, system: 'You are terse.', messages: [{ role: 'user', content: 'hello' }] })
    .finalMessage();
  check(streamed.content[0]?.text === plain.content[0].text, 'anthropic: streamed text = whole text', [streamed.content, plain.content]);
  check(streamed.usage.output_tokens === plain.usage.output_tokens, 'anthropic: streamed usage', streamed.usage);

  // A tool round trip on a session: forced call (streamed), then its result.
  const session = await newSession();
  const headers = { 'X-Session-Id': session };
  const tools = [{ name: 'get_weather', description: 'Weather for a city.', input_schema: weatherSchema }];
  const messages = [{ role: 'user', content: 'What is the weather in Oslo?' }];
  const first = await client.messages
    .stream({ ...base, max_tokens: 400, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages }, { headers })
    .finalMessage();
  const use = first.content.find((b) => b.type === 'tool_use');
  check(first.stop_reason === 'tool_use' && use?.name === 'get_weather', 'anthropic: forced tool_use', first.content);
  check(typeof use?.input?.city === 'string' && codePoints(use.input.city) <= 10, 'anthropic: input matches input_schema', use?.input);
  messages.push({ role: 'assistant', content: first.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C' }] });
  const second = await client.messages.create({ ...base, tools, messages }, { headers });
  const context = first.usage.input_tokens + first.usage.cache_read_input_tokens + first.usage.output_tokens;
  check(second.usage.cache_read_input_tokens >= context - 1, 'anthropic: turn 2 cache_read covers turn 1', { first: first.usage, second: second.usage });
  const count = await client.messages.countTokens({ model: 'cedar', tools, messages });
  check(count.input_tokens === second.usage.input_tokens + second.usage.cache_read_input_tokens, 'anthropic: count_tokens', count);
  return { part: 'anthropic', turn2_cache_read: second.usage.cache_read_input_tokens, turn1_context: context };
}

async function responses() {
  const client = new OpenAI({ baseURL: `${root}/v1`, apiKey, fetch: fetchFn, maxRetries: 0 });
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather for a city.', parameters: weatherSchema, strict: true }];
  const first = await client.responses.create({
    model: 'cedar', instructions: 'You are a weather agent.', input: 'Weather in Oslo?', tools,
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 400, temperature: 1, seed: 5,
  });
  const call = first.output.find((i) => i.type === 'function_call');
  check(call?.name === 'get_weather', 'responses: forced function_call', first.output);
  check(typeof JSON.parse(call.arguments).city === 'string', 'responses: arguments match the schema', call?.arguments);
  // Only the new item, continuing the stored response (streamed).
  const stream = await client.responses.create({
    model: 'cedar', instructions: 'You are a weather agent.', previous_response_id: first.id, tools, max_output_tokens: 12,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 C' }], stream: true,
  });
  let text = '', done = null;
  const types = [];
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') done = ev.response;
  }
  check(types[0] === 'response.created' && done !== null, 'responses: event sequence', types);
  check(done.output[0]?.content?.[0]?.text === text, 'responses: streamed deltas = final text', [text, done.output]);
  const context = first.usage.input_tokens + first.usage.output_tokens;
  check(done.usage.input_tokens_details.cached_tokens >= context - 1, 'responses: previous_response_id keeps the live state', { first: first.usage, second: done.usage });
  check(done.previous_response_id === first.id, 'responses: previous_response_id echoed', done.previous_response_id);
  let notFound = null;
  try {
    await client.responses.create({ model: 'cedar', previous_response_id: 'resp_unknown', input: 'x' });
  } catch (e) {
    notFound = e.status;
  }
  check(notFound === 404, 'responses: unknown previous_response_id is 404', notFound);
  return { part: 'responses', turn2_cached: done.usage.input_tokens_details.cached_tokens, turn1_context: context };
}

async function aisdk() {
  const provider = createOpenAI({ baseURL: `${root}/v1`, apiKey, fetch: fetchFn });
  const model = provider('cedar');  // the Responses API (the provider's default)
  const schema = checkedSchema(
    {
      type: 'object', additionalProperties: false, required: ['name', 'age', 'pets'],
      properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer' }, pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 } },
    },
    (o) => typeof o?.name === 'string' && codePoints(o.name) <= 8 && isInt(o.age) && Array.isArray(o.pets) && o.pets.length <= 2 &&
      o.pets.every((p) => p === 'cat' || p === 'dog') && Object.keys(o).length === 3);
  const objects = [];
  for (let i = 0; i < 2; i++) {
    const r = await generateObject({ model, schema, prompt: 'Describe a person as JSON.', temperature: 1, seed: 9 + i, maxRetries: 0, maxOutputTokens: 1500 });
    check(schema.validate(r.object).success, 'aisdk: generateObject matches the schema', r.object);
    objects.push(r);
  }
  const inputs = objects[0].usage.inputTokens;
  check(objects[1].usage.cachedInputTokens >= inputs - 16, 'aisdk: the second generateObject hits the prefix cache', objects.map((o) => o.usage));

  let executed = 0;
  const result = await generateText({
    model, prompt: 'What is the weather in Oslo?', temperature: 1, seed: 4, maxRetries: 0, maxOutputTokens: 400,
    tools: {
      get_weather: tool({
        description: 'Weather for a city.',
        inputSchema: checkedSchema(weatherSchema, (i) => typeof i?.city === 'string' && codePoints(i.city) <= 10 && (i.days === undefined || isInt(i.days))),
        execute: async ({ city }) => { executed++; return `Sunny in ${city}`; },
      }),
    },
    toolChoice: { type: 'tool', toolName: 'get_weather' },
    prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none', maxOutputTokens: 8 } : {}),
    stopWhen: stepCountIs(2),
  });
  check(executed === 1, 'aisdk: the forced tool ran once', [executed, result.steps[0]?.content]);
  check(result.steps.length === 2, 'aisdk: two steps', result.steps.length);
  const [s0, s1] = result.steps;
  check(s0.toolCalls[0]?.toolName === 'get_weather', 'aisdk: step 1 called the forced tool', s0.toolCalls);
  // Step 2 resends the conversation (item references to the stored items): the prefix cache
  // holds step 1's prompt and output up to its last whole page.
  const context = s0.usage.inputTokens + s0.usage.outputTokens;
  check(s1.usage.cachedInputTokens >= context - 16, 'aisdk: step 2 cached tokens cover step 1', [s0.usage, s1.usage]);
  return { part: 'aisdk', step2_cached: s1.usage.cachedInputTokens, step1_context: context };
}

const parts = { anthropic, responses, aisdk };
try {
  for (const name of opt.parts.split(',')) {
    const out = await parts[name]();
    console.log(JSON.stringify(out));
  }
} catch (e) {
  failures++;
  console.error('FAIL: exception', e?.stack ?? e);
  if (e?.text !== undefined) console.error('the model\'s text:', JSON.stringify(e.text));
} finally {
  closeUnixSocketAgents();
}
process.exit(failures ? 1 : 0);
