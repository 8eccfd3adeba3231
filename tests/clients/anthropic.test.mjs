// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through
// clients we did not write:
//  - the official @anthropic-ai/sdk: messages.create and messages.stream
//    (its own event parser and accumulator: an event out of order or of an
//    unknown type throws), stop sequences, structured output, countTokens,
//    a tool-use round trip and an agent loop of three, errors as the SDK's
//    exception classes, the key sent as x-api-key;
//  - LangChain's ChatAnthropic, invoked and streamed;
//  - every answer and streamed event validated against docs/openapi.json.
// The demo model has random weights: the checks are about shapes, the
// equality of streamed and unary answers for the same seed, and what the
// constraints guarantee. Run with `node --test` by clients_e2e.py (RS_HTTP,
// RS_AUTH_HTTP, RS_ROOT, NODE_MODULES_DIR).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HTTP, load, openApi } from './lib.mjs';

const { default: Anthropic } = await load('@anthropic-ai/sdk/index.mjs');
const client = new Anthropic({ baseURL: HTTP, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const MODEL = 'model';
const { ajv, conforms } = openApi();

// A stream run through the SDK's helper: its final message and every raw
// event (each validated against the document).
async function streamed(params) {
  const stream = client.messages.stream(params);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e));
  const final = await stream.finalMessage();
  for (const e of events) conforms('AnthropicStreamEvent', e);
  assert.equal(events[0].type, 'message_start');
  assert.equal(events.at(-1).type, 'message_stop');
  return { final, events };
}
const text = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const promptTokens = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0);

test('anthropic SDK: messages.create and messages.stream give the same message', async () => {
  for (const seed of [1, 2, 3]) {
    const params = { model: MODEL, system: 'Be brief.', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 24, temperature: 1, seed };
    const unary = await client.messages.create(params);
    conforms('AnthropicMessage', unary);
    assert.equal(unary.type, 'message');
    assert.equal(unary.role, 'assistant');
    assert.equal(unary.model, MODEL);
    assert.ok(['end_turn', 'max_tokens'].includes(unary.stop_reason), unary.stop_reason);
    assert.equal(unary.usage.output_tokens <= 24, true);
    const { final } = await streamed(params);
    assert.deepEqual(final.content, unary.content, `seed ${seed}`);
    assert.equal(final.stop_reason, unary.stop_reason);
    assert.equal(final.usage.output_tokens, unary.usage.output_tokens);
    assert.equal(promptTokens(final.usage), promptTokens(unary.usage));
  }
});

test('anthropic SDK: stop sequences end the text and are reported', async () => {
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Count with me.' }], max_tokens: 24, temperature: 0 };
  const free = text(await client.messages.create(params));
  const chars = Array.from(free);  // whole code points: the random model writes any characters
  assert.ok(chars.length >= 4, `too short a text: ${JSON.stringify(free)}`);
  const stop = chars.slice(1, 3).join('');
  const stopped = { ...params, stop_sequences: [stop, 'never-generated-\u0001'] };
  const m = await client.messages.create(stopped);
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(text(m), free.slice(0, free.indexOf(stop)));
  const { final } = await streamed(stopped);
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.stop_sequence, stop);
  assert.deepEqual(final.content, m.content);
});

test('anthropic SDK: output_config json_schema constrains the text', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer' }, w: { enum: ['a', 'b'] } }, required: ['n', 'w'], additionalProperties: false };
  const validate = ajv.compile(schema);
  const params = { model: MODEL, messages: [{ role: 'user', content: 'JSON please.' }], max_tokens: 200, temperature: 0, output_config: { format: { type: 'json_schema', schema } } };
  const m = await client.messages.create(params);
  assert.equal(m.stop_reason, 'end_turn', text(m));
  assert.ok(validate(JSON.parse(text(m))), JSON.stringify(validate.errors));
  const { final } = await streamed(params);
  assert.equal(text(final), text(m));
});

const TOOLS = [
  { name: 'get_weather', description: 'Weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false } },
  { name: 'get_time', description: 'Time in a zone', input_schema: { type: 'object', properties: { zone: { type: 'string', maxLength: 10 } }, required: ['zone'] } },
];
const toolValidators = Object.fromEntries(TOOLS.map((t) => [t.name, ajv.compile(t.input_schema)]));
function checkUse(block) {
  assert.equal(block.type, 'tool_use');
  assert.match(block.id, /^toolu_[0-9a-f]+$/);
  const validate = toolValidators[block.name];
  assert.ok(validate, `unknown tool ${block.name}`);
  assert.ok(validate(block.input), JSON.stringify(validate.errors));
}

test('anthropic SDK: an agent loop of three tool round trips, then an answer', async () => {
  const messages = [{ role: 'user', content: 'Plan my trip: weather in Oslo, then the time there.' }];
  for (let round = 0; round < 3; round++) {
    const r = await client.messages.create({ model: MODEL, messages, tools: TOOLS, tool_choice: { type: 'any' }, max_tokens: 200, temperature: 0.7, seed: 3 + round });
    conforms('AnthropicMessage', r);
    assert.equal(r.stop_reason, 'tool_use', `round ${round}: ${JSON.stringify(r.content)}`);
    const uses = r.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1);
    uses.forEach(checkUse);
    // The assistant's turn goes back as it came; each tool_use gets its result.
    messages.push({ role: 'assistant', content: r.content });
    messages.push({ role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: `{"round": ${round}}` })) });
  }
  const counted = await client.messages.countTokens({ model: MODEL, messages, tools: TOOLS });
  const answer = await client.messages.create({ model: MODEL, messages, tools: TOOLS, tool_choice: { type: 'none' }, max_tokens: 8, temperature: 0 });
  assert.ok(answer.content.every((b) => b.type === 'text'), JSON.stringify(answer.content));
  assert.equal(promptTokens(answer.usage), counted.input_tokens);
  // disable_parallel_tool_use: one call.
  const one = await client.messages.create({ model: MODEL, messages: messages.slice(0, 1), tools: TOOLS, tool_choice: { type: 'any', disable_parallel_tool_use: true }, max_tokens: 200, temperature: 1, seed: 9 });
  assert.equal(one.content.filter((b) => b.type === 'tool_use').length, 1, JSON.stringify(one.content));
});

test('anthropic SDK: a named tool, unary and streamed as input_json_delta', async () => {
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Time in Tokyo?' }], tools: TOOLS, tool_choice: { type: 'tool', name: 'get_time' }, max_tokens: 100, temperature: 0 };
  const r = await client.messages.create(params);
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(r.content));
  assert.equal(uses[0].name, 'get_time');
  checkUse(uses[0]);
  const { final, events } = await streamed(params);
  assert.ok(events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta'));
  const streamedUses = final.content.filter((b) => b.type === 'tool_use');
  assert.equal(streamedUses.length, 1);
  assert.deepEqual(streamedUses[0].input, uses[0].input);
});

test('anthropic SDK: countTokens counts the prompt messages.create runs', async () => {
  const params = { model: MODEL, system: [{ type: 'text', text: 'You are terse.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: 'there' }] }] };
  for (const extra of [{}, { tools: TOOLS }]) {
    const counted = await client.messages.countTokens({ ...params, ...extra });
    conforms('AnthropicCountTokens', counted);
    const m = await client.messages.create({ ...params, ...extra, max_tokens: 1 });
    assert.equal(promptTokens(m.usage), counted.input_tokens);
  }
});

test('anthropic SDK: errors arrive as the SDK\'s exception classes, in Anthropic\'s shape', async () => {
  const user = [{ role: 'user', content: 'x' }];
  const rejectsWith = (promise, Class, type, inMessage) => assert.rejects(promise, (e) => {
    assert.ok(e instanceof Class, `${e.constructor.name}: ${e.message}`);
    conforms('AnthropicError', e.error);
    assert.equal(e.error.error.type, type);
    assert.ok(e.error.error.message.includes(inMessage), e.error.error.message);
    return true;
  });
  await rejectsWith(client.messages.create({ model: MODEL, messages: user, max_tokens: 4, frobnicate: 1 }), Anthropic.BadRequestError, 'invalid_request_error', 'frobnicate');
  await rejectsWith(client.messages.create({ model: MODEL, messages: user, max_tokens: 100000 }), Anthropic.BadRequestError, 'invalid_request_error', 'max_tokens');
  await rejectsWith(client.messages.create({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }], max_tokens: 4 }),
    Anthropic.BadRequestError, 'invalid_request_error', 'messages.0.content.0.type');
  await rejectsWith(client.messages.create({ model: 'no-such-model', messages: user, max_tokens: 4 }), Anthropic.NotFoundError, 'not_found_error', 'no-such-model');
  await rejectsWith(client.messages.countTokens({ model: MODEL, messages: [] }), Anthropic.BadRequestError, 'invalid_request_error', 'messages');
  // Streamed: a request refused before the stream starts is the same error.
  await rejectsWith(client.messages.stream({ model: MODEL, messages: user, max_tokens: 4, top_k: -3 }).finalMessage(), Anthropic.BadRequestError, 'invalid_request_error', 'top_k');
  // Keys: the SDK sends x-api-key.
  const wrong = new Anthropic({ baseURL: process.env.RS_AUTH_HTTP, apiKey: 'wrong', maxRetries: 0 });
  await rejectsWith(wrong.messages.create({ model: MODEL, messages: user, max_tokens: 1 }), Anthropic.AuthenticationError, 'authentication_error', '');
  const right = new Anthropic({ baseURL: process.env.RS_AUTH_HTTP, apiKey: 'secret-one', maxRetries: 0 });
  const ok = await right.messages.create({ model: MODEL, messages: user, max_tokens: 1 });
  assert.equal(ok.usage.output_tokens, 1);
});

test('LangChain ChatAnthropic invokes and streams', async () => {
  const { ChatAnthropic } = await load('@langchain/anthropic/dist/index.js');
  const llm = new ChatAnthropic({ model: MODEL, apiKey: 'unused', anthropicApiUrl: HTTP, maxTokens: 5, temperature: 0, maxRetries: 0 });
  const msg = await llm.invoke('Say hi');
  const content = typeof msg.content === 'string' ? msg.content : msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(typeof content, 'string');
  let joined = '';
  for await (const chunk of await llm.stream('Say hi')) joined += typeof chunk.content === 'string' ? chunk.content : chunk.content.map((b) => b.text ?? '').join('');
  assert.equal(joined, content);
});
