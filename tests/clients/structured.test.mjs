// Structured output and tool calls, checked by clients we did not write:
//  - 200 randomized requests over 20 JSON Schemas, regexes and choice lists,
//    mixed with free-text requests, 16 at a time, every constrained output
//    validated by ajv (JSON Schema 2020-12, with ajv-formats); the demo
//    model has random weights, so validity comes from the constraint alone;
//  - greedy constrained outputs equal alone and in that batch;
//  - the openai SDK: response_format json_schema, tools with tool_choice
//    "required" and a named function (unary and streamed), and the tool
//    result sent back;
//  - LangChain's withStructuredOutput (JSON Schema and function calling).
// Run with `node --test` by clients_e2e.py (RS_HTTP, NODE_MODULES_DIR).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HTTP, load, require } from './lib.mjs';

const { default: OpenAI } = await load('openai/index.mjs');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;
const client = new OpenAI({ baseURL: `${HTTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

async function post(p, body) {
  const r = await fetch(`${HTTP}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, text, body: JSON.parse(text) };
}

// Twenty schemas of the kinds clients send (OpenAI strict schemas,
// Pydantic and Zod output).
const SCHEMAS = [
  { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer', minimum: 0, maximum: 130 } }, required: ['name', 'age'], additionalProperties: false },
  { type: 'object', properties: { ok: { type: 'boolean' }, note: { type: ['string', 'null'] } }, required: ['ok', 'note'] },
  { type: 'array', items: { type: 'integer', minimum: -5, maximum: 5 }, minItems: 1, maxItems: 4 },
  { type: 'object', properties: { color: { enum: ['red', 'green', 'blue'] }, shade: { type: 'number', minimum: 0, maximum: 1 } }, required: ['color'] },
  { type: 'object', properties: { id: { type: 'string', format: 'uuid' }, when: { type: 'string', format: 'date' } }, required: ['id', 'when'] },
  { type: 'object', properties: { at: { type: 'string', format: 'date-time' }, email: { type: 'string', format: 'email' } }, required: ['at', 'email'] },
  { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' } }, required: ['code'] },
  { type: 'object', properties: { tags: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 6 }, maxItems: 3 } }, required: ['tags'] },
  { $defs: { Point: { type: 'object', properties: { x: { type: 'number' }, y: { type: 'number' } }, required: ['x', 'y'] } }, type: 'object', properties: { a: { $ref: '#/$defs/Point' }, b: { $ref: '#/$defs/Point' } }, required: ['a', 'b'] },
  { anyOf: [{ type: 'object', properties: { kind: { const: 'cat' }, lives: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['kind', 'lives'] }, { type: 'object', properties: { kind: { const: 'dog' } }, required: ['kind'] }] },
  { type: 'object', properties: { title: { type: 'string', maxLength: 20 }, sections: { type: 'array', items: { type: 'object', properties: { heading: { type: 'string', maxLength: 10 }, words: { type: 'integer', minimum: 0 } }, required: ['heading', 'words'] }, maxItems: 2 } }, required: ['title', 'sections'] },
  { type: 'integer', exclusiveMinimum: 10, exclusiveMaximum: 100 },
  { type: 'string', enum: ['positive', 'negative', 'neutral'] },
  { type: 'object', additionalProperties: { type: 'integer' } },
  { type: 'object', properties: { summary: { type: 'string', minLength: 5, maxLength: 40 }, keywords: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 2, maxItems: 4 } }, required: ['summary', 'keywords'], additionalProperties: false },
  { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#' }, maxItems: 2 } }, required: ['v'] },
  { type: 'array', prefixItems: [{ type: 'string', maxLength: 4 }, { type: 'boolean' }, { type: 'null' }] },
  { type: 'object', properties: { ip: { type: 'string', format: 'ipv4' }, port: { type: 'integer', minimum: 1, maximum: 65535 } }, required: ['ip', 'port'] },
  { type: 'object', properties: { price: { type: 'number', minimum: -100, maximum: 100 }, currency: { const: 'EUR' } }, required: ['price', 'currency'] },
  { title: 'Answer', description: 'Pydantic style', type: 'object', properties: { answer: { title: 'Answer', type: 'string', maxLength: 30 }, confidence: { title: 'Confidence', type: 'number', minimum: 0, maximum: 1, default: 0.5 } }, required: ['answer'] },
];
const REGEXES = ['[a-z]{3}-\\d{2,4}', '(yes|no|maybe)', '\\d{1,3}(\\.\\d{1,3}){3}', '[A-Z][a-z]{0,8}( [A-Z][a-z]{0,8}){0,2}', '\\(\\d{3}\\) \\d{3}-\\d{4}'];
const CHOICES = [['alpha', 'beta', 'gamma'], ['Paris', 'Oslo', 'Zürich', '東京'], ['0', '1']];

// A deterministic pseudo-random generator: the run is the same every time.
function rng(seed) {
  let s = seed >>> 0;
  return () => { s = (s * 1664525 + 1013904223) >>> 0; return s / 2 ** 32; };
}

function makeRequest(rand, i) {
  const chat = rand() < 0.5;
  const body = { model: 'model', max_tokens: 220, temperature: rand() < 0.3 ? 0 : 0.5 + rand(), seed: i };
  if (chat) body.messages = [{ role: 'user', content: `Request ${i}: answer in the requested format.` }];
  else body.prompt = `Request ${i}:`;
  const kind = rand();
  let check;
  if (kind < 0.6) {
    const k = Math.floor(rand() * SCHEMAS.length);
    const schema = SCHEMAS[k];
    if (chat && rand() < 0.7) body.response_format = { type: 'json_schema', json_schema: { name: `s${k}`, schema, strict: true } };
    else body.guided_json = schema;
    const validate = ajv.compile(schema);
    check = (text) => {
      const value = JSON.parse(text);
      assert.ok(validate(value), `schema ${k}: ${JSON.stringify(validate.errors)}\n${text}`);
    };
  } else if (kind < 0.7) {
    body.response_format = { type: 'json_object' };
    if (!chat) { delete body.response_format; body.structured_outputs = { json_object: true }; }
    check = (text) => {
      const value = JSON.parse(text);
      assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), text);
    };
  } else if (kind < 0.8) {
    const re = REGEXES[Math.floor(rand() * REGEXES.length)];
    body.guided_regex = re;
    check = (text) => assert.match(text, new RegExp(`^(?:${re})$`, 'u'));
  } else if (kind < 0.87) {
    const choices = CHOICES[Math.floor(rand() * CHOICES.length)];
    body.guided_choice = choices;
    check = (text) => assert.ok(choices.includes(text), text);
  } else {
    body.max_tokens = 24;  // free text, mixed in
    check = null;
  }
  return { chat, body, check };
}

async function run(req) {
  const r = await post(req.chat ? '/v1/chat/completions' : '/v1/completions', req.body);
  assert.equal(r.status, 200, r.text);
  const choice = r.body.choices[0];
  return { text: req.chat ? choice.message.content : choice.text, finish: choice.finish_reason };
}

test('200 randomized constrained requests at concurrency 16 all validate; greedy ones equal alone and batched', async () => {
  const rand = rng(20261201);
  const requests = Array.from({ length: 200 }, (_, i) => makeRequest(rand, i));
  // Greedy constrained requests, first each alone.
  const greedy = requests.map((r, i) => [r, i]).filter(([r]) => r.check && r.body.temperature === 0).slice(0, 8);
  assert.ok(greedy.length >= 4, 'too few greedy requests drawn');
  const alone = new Map();
  for (const [r, i] of greedy) alone.set(i, (await run(r)).text);
  // Then all 200, 16 at a time.
  const results = new Array(requests.length);
  let next = 0;
  async function worker() {
    while (next < requests.length) {
      const i = next++;
      results[i] = await run(requests[i]);
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker));
  let constrained = 0;
  for (let i = 0; i < requests.length; ++i) {
    if (!requests[i].check) continue;
    ++constrained;
    assert.equal(results[i].finish, 'stop', `request ${i} did not finish: ${JSON.stringify(results[i])}`);
    requests[i].check(results[i].text);
  }
  assert.ok(constrained >= 150, `${constrained} constrained requests`);
  for (const [, i] of greedy) assert.equal(results[i].text, alone.get(i), `greedy request ${i} differs batched`);
});

test('a schema the server cannot compile is a 400 naming the keyword and the field', async () => {
  const r = await post('/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } },
  });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.body.error.param, 'response_format');
  assert.match(r.body.error.message, /uniqueItems/);
  const re = await post('/v1/completions', { prompt: 'x', guided_regex: '(?=a)b' });
  assert.equal(re.status, 400);
  assert.equal(re.body.error.param, 'guided_regex');
});

test('openai SDK: response_format json_schema, unary and streamed', async () => {
  const schema = SCHEMAS[14];
  const validate = ajv.compile(schema);
  const rf = { type: 'json_schema', json_schema: { name: 'summary', schema, strict: true } };
  const messages = [{ role: 'user', content: 'Summarize: the meeting moved to Tuesday.' }];
  const r = await client.chat.completions.create({ model: 'model', messages, response_format: rf, max_tokens: 200, temperature: 0 });
  const value = JSON.parse(r.choices[0].message.content);
  assert.ok(validate(value), JSON.stringify(validate.errors));
  let streamed = '';
  const stream = await client.chat.completions.create({ model: 'model', messages, response_format: rf, max_tokens: 200, temperature: 0, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, r.choices[0].message.content);
});

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 10 } }, required: ['zone'] } } },
];
const toolValidators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  const validate = toolValidators[call.function.name];
  assert.ok(validate, `unknown tool ${call.function.name}`);
  assert.ok(validate(JSON.parse(call.function.arguments)), JSON.stringify(validate.errors));
}

test('openai SDK: tools with tool_choice required round-trip, the tool result sent back', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Oslo?' }];
  const r = await client.chat.completions.create({ model: 'model', messages, tools: TOOLS, tool_choice: 'required', max_tokens: 200, temperature: 0.7, seed: 3 });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.content, null);
  assert.ok(msg.tool_calls.length >= 1);
  msg.tool_calls.forEach(checkCall);
  // The assistant's calls and the tool's results go back into the history.
  const history = [...messages, msg, ...msg.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '{"temp": 4}' }))];
  const follow = await client.chat.completions.create({ model: 'model', messages: history, tools: TOOLS, max_tokens: 8, temperature: 0 });
  assert.equal(typeof follow.choices[0].message.content, 'string');
  // parallel_tool_calls: false gives one call.
  const one = await client.chat.completions.create({ model: 'model', messages, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 1, seed: 9 });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
});

test('openai SDK: a named function, unary and streamed as delta.tool_calls', async () => {
  const messages = [{ role: 'user', content: 'Time in Tokyo?' }];
  const tool_choice = { type: 'function', function: { name: 'get_time' } };
  const r = await client.chat.completions.create({ model: 'model', messages, tools: TOOLS, tool_choice, max_tokens: 100, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_time');
  checkCall(r.choices[0].message.tool_calls[0]);
  // The SDK's streaming helper assembles the calls from the deltas.
  const runner = client.chat.completions.stream({ model: 'model', messages, tools: TOOLS, tool_choice, max_tokens: 100, temperature: 0 });
  const final = await runner.finalChatCompletion();
  const streamed = final.choices[0].message.tool_calls;
  assert.equal(streamed.length, 1);
  assert.equal(streamed[0].function.arguments, r.choices[0].message.tool_calls[0].function.arguments);
});

test('LangChain withStructuredOutput returns parsed objects (JSON Schema and function calling)', async () => {
  const { ChatOpenAI } = await load('@langchain/openai/dist/index.js');
  const llm = new ChatOpenAI({ model: 'model', apiKey: 'unused', configuration: { baseURL: `${HTTP}/v1` }, maxTokens: 150, temperature: 0, maxRetries: 0 });
  const schema = SCHEMAS[0];
  const validate = ajv.compile(schema);
  for (const method of ['jsonSchema', 'functionCalling']) {
    const structured = llm.withStructuredOutput(schema, { name: 'person', method });
    const value = await structured.invoke('Invent a person.');
    assert.ok(validate(value), `${method}: ${JSON.stringify(validate.errors)} ${JSON.stringify(value)}`);
  }
});
