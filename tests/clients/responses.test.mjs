// OpenAI's Responses API (/v1/responses) through clients we did not write:
//  - the official openai SDK: responses.create and responses.stream (its
//    own strict event accumulator: an event out of order, a missing item or
//    a sequence gap throws), text.format json_schema, a function-tool round
//    trip with function_call_output, previous_response_id, an agent loop of
//    three tool round trips, retrieve / delete / cancel with background,
//    the thread listed by inputItems.list page by page, errors as the SDK's
//    exception classes, stored responses per API key;
//  - LangChain's ChatOpenAI with useResponsesApi, invoked and streamed;
//  - every answer and streamed event validated against docs/openapi.json.
// The demo model has random weights: the checks are about shapes, the
// equality of streamed and unary answers for the same seed, and what the
// constraints guarantee. Run with `node --test` by clients_e2e.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HTTP, load, openApi } from './lib.mjs';

const { default: OpenAI } = await load('openai/index.mjs');
const client = new OpenAI({ baseURL: `${HTTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const MODEL = 'model';
const { ajv, conforms } = openApi();

// What differs between two runs of the same request.
function comparable(r) {
  const { id, created_at, completed_at, ...rest } = structuredClone(r);
  // Ids are new for every response and call; the SDK's parse helpers add
  // output_parsed / parsed_arguments to what the stream helper returns.
  rest.output = rest.output.map(({ id: _, call_id: __, parsed_arguments: ___, ...item }) =>
    item.content ? { ...item, content: item.content.map(({ parsed: ____, ...part }) => part) } : item);
  delete rest.usage.input_tokens_details.cached_tokens;  // depends on what ran before
  delete rest.output_text;
  delete rest.output_parsed;
  return rest;
}

// A stream through the SDK's helper: its final response and every raw event
// (each validated against the document).
async function streamed(params) {
  const stream = client.responses.stream(params);
  const events = [];
  stream.on('event', (e) => events.push(e));
  const final = await stream.finalResponse();
  for (const e of events) conforms('ResponseStreamEvent', e);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type), events.at(-1).type);
  return { final, events };
}

test('openai SDK: responses.create and responses.stream give the same response', async () => {
  for (const seed of [1, 2, 3]) {
    const params = { model: MODEL, instructions: 'Be brief.', input: 'Tell me a story.', max_output_tokens: 8 * seed, temperature: 1, seed };
    const unary = await client.responses.create(params);
    conforms('Response', unary);
    assert.match(unary.id, /^resp_/);
    assert.equal(unary.object, 'response');
    assert.equal(unary.model, MODEL);
    assert.ok(['completed', 'incomplete'].includes(unary.status), unary.status);
    assert.equal(typeof unary.output_text, 'string');  // the SDK's convenience, from the output items
    assert.ok(unary.usage.output_tokens <= 8 * seed);
    const { final } = await streamed(params);
    assert.deepEqual(comparable(final), comparable(unary), `seed ${seed}`);
    assert.equal(final.output_text, unary.output_text);
  }
});

test('openai SDK: text.format json_schema constrains the text, and the SDK parses it', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer' }, w: { enum: ['a', 'b'] } }, required: ['n', 'w'], additionalProperties: false };
  const validate = ajv.compile(schema);
  const params = { model: MODEL, input: 'JSON please.', max_output_tokens: 200, temperature: 0, text: { format: { type: 'json_schema', name: 'pair', schema, strict: true } } };
  const r = await client.responses.parse(params);
  assert.equal(r.status, 'completed', r.output_text);
  assert.ok(validate(JSON.parse(r.output_text)), JSON.stringify(validate.errors));
  assert.deepEqual(r.output_parsed, JSON.parse(r.output_text));
  const { final } = await streamed(params);
  assert.equal(final.output_text, r.output_text);
});

const TOOLS = [
  { type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false } },
  { type: 'function', name: 'get_time', description: 'Time in a zone', strict: false, parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 10 } }, required: ['zone'] } },
];
const toolValidators = Object.fromEntries(TOOLS.map((t) => [t.name, ajv.compile(t.parameters)]));
function checkCall(item) {
  assert.equal(item.type, 'function_call');
  assert.match(item.call_id, /^call_[0-9a-f]+$/);
  assert.match(item.id, /^fc_/);
  const validate = toolValidators[item.name];
  assert.ok(validate, `unknown tool ${item.name}`);
  assert.ok(validate(JSON.parse(item.arguments)), JSON.stringify(validate.errors));
}

test('openai SDK: a function-tool round trip, streamed and unary', async () => {
  const params = { model: MODEL, input: 'Time in Tokyo?', tools: TOOLS, tool_choice: { type: 'function', name: 'get_time' }, max_output_tokens: 100, temperature: 0 };
  const r = await client.responses.create(params);
  const calls = r.output.filter((i) => i.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  assert.equal(calls[0].name, 'get_time');
  checkCall(calls[0]);
  const { final, events } = await streamed(params);
  assert.ok(events.some((e) => e.type === 'response.function_call_arguments.delta'));
  assert.deepEqual(comparable(final), comparable(r));
  // The call's output goes back with the call, as the SDK's docs show.
  const input = [{ role: 'user', content: 'Time in Tokyo?' }, ...r.output, { type: 'function_call_output', call_id: calls[0].call_id, output: '{"time": "09:00"}' }];
  const answer = await client.responses.create({ model: MODEL, input, tools: TOOLS, tool_choice: 'none', max_output_tokens: 6, temperature: 0 });
  conforms('Response', answer);
  assert.ok(answer.output.every((i) => i.type === 'message'), JSON.stringify(answer.output));
  // previous_response_id: the stored conversation instead of the input.
  const continued = await client.responses.create({ model: MODEL, previous_response_id: r.id, input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '{"time": "09:00"}' }], tools: TOOLS, tool_choice: 'none', max_output_tokens: 6, temperature: 0 });
  assert.equal(continued.previous_response_id, r.id);
  assert.equal(continued.usage.input_tokens, answer.usage.input_tokens);
  assert.equal(continued.output_text, answer.output_text);
});

test('openai SDK: an agent loop of three tool round trips over previous_response_id, then an answer', async () => {
  let previous = null;
  let input = 'Plan my trip: weather in Oslo, then the time there.';
  const thread = [];  // the items the final answer is made from, oldest first
  for (let round = 0; round < 3; round++) {
    const r = await client.responses.create({ model: MODEL, input, previous_response_id: previous, tools: TOOLS, tool_choice: 'required', max_output_tokens: 200, temperature: 0.7, seed: 3 + round });
    conforms('Response', r);
    const calls = r.output.filter((i) => i.type === 'function_call');
    assert.ok(calls.length >= 1, `round ${round}: ${JSON.stringify(r.output)}`);
    calls.forEach(checkCall);
    thread.push(...(round === 0 ? [{ type: 'message', role: 'user' }] : input), ...r.output);
    previous = r.id;
    input = calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: `{"round": ${round}}` }));
  }
  thread.push(...input);
  const answer = await client.responses.create({ model: MODEL, input, previous_response_id: previous, tools: TOOLS, tool_choice: 'none', max_output_tokens: 8, temperature: 0 });
  assert.ok(answer.output.every((i) => i.type === 'message'), JSON.stringify(answer.output));
  assert.ok(answer.usage.input_tokens > 50, 'the stored conversation was not continued');
  // The thread, as the SDK lists it page by page (two items a page).
  const listed = [];
  for await (const item of client.responses.inputItems.list(answer.id, { order: 'asc', limit: 2 })) listed.push(item);
  assert.equal(listed.length, thread.length, JSON.stringify(listed));
  const first = await (await fetch(`${HTTP}/v1/responses/${answer.id}/input_items?limit=2`)).json();
  conforms('ResponseItemList', first);
  assert.deepEqual(first.data, listed.slice(-2).reverse());  // newest first by default
  assert.equal(first.has_more, true);
  assert.deepEqual(listed[0].content, [{ type: 'input_text', text: 'Plan my trip: weather in Oslo, then the time there.' }]);
  listed.forEach((item, i) => {
    assert.equal(item.type, thread[i].type ?? 'message', `item ${i}`);
    if (thread[i].id) assert.deepEqual(item, thread[i]);  // output items as the responses gave them
    if (item.type === 'function_call_output') assert.equal(item.call_id, thread[i].call_id);
    assert.equal(item.status, 'completed');
  });
});

test('openai SDK: retrieve, delete, background and cancel; responses belong to their key', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 4 });
  const got = await client.responses.retrieve(r.id);
  assert.deepEqual(comparable(got), comparable(r));
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.delete(r.id), OpenAI.NotFoundError);
  await assert.rejects(client.responses.retrieve(r.id), OpenAI.NotFoundError);
  // background: queued at once, polled to its end.
  const queued = await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, background: true, seed: 5, temperature: 1 });
  assert.equal(queued.status, 'queued');
  let done = queued;
  for (let i = 0; i < 600 && ['queued', 'in_progress'].includes(done.status); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    done = await client.responses.retrieve(queued.id);
  }
  conforms('Response', done);
  assert.ok(['completed', 'incomplete'].includes(done.status), done.status);
  const cancelled = await client.responses.cancel(queued.id);  // finished: left as it is
  assert.equal(cancelled.status, done.status);
  await assert.rejects(client.responses.cancel((await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 1 })).id), OpenAI.BadRequestError);
  // Keys: a response stored under one key is not found under another.
  const one = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-one', maxRetries: 0 });
  const two = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-two', maxRetries: 0 });
  const mine = await one.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 2 });
  assert.equal((await one.responses.retrieve(mine.id)).id, mine.id);
  await assert.rejects(two.responses.retrieve(mine.id), OpenAI.NotFoundError);
  await assert.rejects(two.responses.create({ model: MODEL, input: 'x', previous_response_id: mine.id }), OpenAI.NotFoundError);
});

test('openai SDK: errors name the Responses API field', async () => {
  const rejectsWith = (promise, Class, param) => assert.rejects(promise, (e) => {
    assert.ok(e instanceof Class, `${e.constructor.name}: ${e.message}`);
    conforms('Error', e.error ? { error: e.error } : e);
    assert.equal(e.param, param, e.message);
    return true;
  });
  await rejectsWith(client.responses.create({ model: MODEL, input: 'x', frobnicate: 1 }), OpenAI.BadRequestError, 'frobnicate');
  await rejectsWith(client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'web_search' }] }), OpenAI.BadRequestError, 'tools[0].type');
  await rejectsWith(client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 100000 }), OpenAI.BadRequestError, 'max_output_tokens');
  await rejectsWith(client.responses.create({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }), OpenAI.BadRequestError, 'input[0].content[0].type');
  await rejectsWith(client.responses.stream({ model: MODEL, input: 'x', temperature: -1 }).finalResponse(), OpenAI.BadRequestError, 'temperature');
});

test('LangChain ChatOpenAI with useResponsesApi invokes and streams', async () => {
  const { ChatOpenAI } = await load('@langchain/openai/dist/index.js');
  const llm = new ChatOpenAI({ model: MODEL, apiKey: 'unused', configuration: { baseURL: `${HTTP}/v1` }, useResponsesApi: true, maxTokens: 5, temperature: 0, maxRetries: 0 });
  const msg = await llm.invoke('Say hi');
  const content = typeof msg.content === 'string' ? msg.content : msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(typeof content, 'string');
  assert.ok(msg.response_metadata?.id?.startsWith('resp_') || msg.id?.startsWith('resp_') || msg.id?.startsWith('msg_'), JSON.stringify(msg).slice(0, 500));
  let joined = '';
  for await (const chunk of await llm.stream('Say hi')) joined += typeof chunk.content === 'string' ? chunk.content : chunk.content.map((b) => b.text ?? '').join('');
  assert.equal(joined, content);
});
