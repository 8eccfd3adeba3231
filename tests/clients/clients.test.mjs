// Clients we did not write, against a running ropeserve (started by
// clients_e2e.py, which passes the addresses in the environment):
//  - the OpenAPI description: valid OpenAPI 3.1, the same as docs/openapi.json,
//    every route it names answered, and live answers of every route
//    validated against its schemas (ajv, JSON Schema 2020-12);
//  - the official openai SDK: models, completions, chat, streaming,
//    logprobs, logit_bias, and errors as the SDK's exception classes;
//  - LangChain's ChatOpenAI and OpenAIEmbeddings;
//  - the cohere-ai SDK's rerank (v1 and v2 clients) and LangChain's
//    CohereRerank on it, against /v1/rerank and /v2/rerank (vLLM's
//    Cohere-compatible shape; package.json pins @aws-crypto/sha256-js
//    because cohere-ai 7.19 requires it at load without declaring it);
//  - @grpc/grpc-js: the service found through server reflection, then
//    Summarize, Answer and Generate called, and error details decoded.
// Run with `node --test`; RS_HTTP, RS_AUTH_HTTP, RS_BUSY_HTTP, RS_GRPC,
// RS_ROOT and NODE_MODULES_DIR come from clients_e2e.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { HTTP, ROOT, load, openApi, require } from './lib.mjs';

const { default: OpenAI } = await load('openai/index.mjs');
const { Validator } = await load('@seriousme/openapi-schema-validator/index.js');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const client = new OpenAI({ baseURL: `${HTTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });

async function getJson(p) {
  const r = await fetch(`${HTTP}${p}`);
  return { status: r.status, body: await r.json() };
}
async function postJson(p, body, base = HTTP) {
  const r = await fetch(`${base}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, text, body: r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : null };
}
function sseData(text) {
  return text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
}

// ---- OpenAPI ----

const { doc, ajv, conforms } = openApi();
// The response schema a route declares for a status.
function responseSchema(route, method, status) {
  const r = doc.paths[route][method].responses[String(status)];
  assert.ok(r, `${method} ${route} declares no ${status}`);
  return r.content['application/json'].schema;
}
function conformsTo(route, method, status, value) {
  const schema = responseSchema(route, method, status);
  const validate = ajv.compile({ $ref: schema.$ref ? `openapi${schema.$ref}` : undefined, ...(schema.$ref ? {} : schema) });
  assert.ok(validate(value), `${method} ${route} ${status}: ${JSON.stringify(validate.errors)}`);
}

test('the served OpenAPI document is valid OpenAPI 3.1 and is docs/openapi.json', async () => {
  const { status, body } = await getJson('/openapi.json');
  assert.equal(status, 200);
  assert.deepEqual(body, doc);
  const result = await new Validator().validate(body);
  assert.ok(result.valid, JSON.stringify(result.errors));
  assert.equal(body.openapi, '3.1.0');
});

test('every route of the document is served with its method, and nothing else is', async () => {
  for (const [route, ops] of Object.entries(doc.paths)) {
    for (const method of Object.keys(ops)) {
      // A path with an {id}: an unknown id is a 404 of the route, not of the server.
      const path = route.replace('{response_id}', 'resp_unknown').replace('{file_id}', 'file-unknown')
        .replace('{batch_id}', 'batch_unknown');
      const r = await fetch(`${HTTP}${path}`, { method: method.toUpperCase(), headers: { 'Content-Type': 'application/json' }, body: method === 'post' ? '{}' : undefined });
      const body = await r.text();
      assert.ok(r.status !== 405, `${method} ${route}: ${r.status}`);
      assert.ok(r.status !== 404 || (path !== route && /no (response|file|batch) with id/.test(body)), `${method} ${route}: ${r.status} ${body}`);
    }
  }
  const r = await fetch(`${HTTP}/v1/audio/speech`, { method: 'POST', body: '{}' });
  assert.equal(r.status, 404);
  conforms('Error', await r.json());
});

test('live answers of every route match their schemas', async () => {
  const models = await getJson('/v1/models');
  conformsTo('/v1/models', 'get', 200, models.body);
  conformsTo('/version', 'get', 200, (await getJson('/version')).body);
  conformsTo('/v1/info', 'get', 200, (await getJson('/v1/info')).body);
  conformsTo('/health', 'get', 200, (await getJson('/health')).body);
  conformsTo('/ready', 'get', 200, (await getJson('/ready')).body);
  const requests = [
    ['/v1/completions', 'CompletionRequest', { prompt: 'Hello', max_tokens: 4, logprobs: 2, seed: 1, n: 2, return_token_ids: true }],
    ['/v1/completions', 'CompletionRequest', { prompt: [[1, 2], 'two'], max_tokens: 2, temperature: 0, logit_bias: { 5: -100 } }],
    ['/v1/chat/completions', 'ChatCompletionRequest', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, logprobs: true, top_logprobs: 2 }],
    ['/v1/summarize', 'SummarizeRequest', { text: 'A long text about budgets.', max_tokens: 4 }],
    ['/v1/qa', 'QaRequest', { question: 'Who?', context: 'Alice met Bob.', top_k: 2 }],
    ['/v1/qa', 'QaRequest', { inputs: [{ question: 'Who?', context: 'Alice met Bob.' }] }],
    ['/v1/completions/render', 'RenderCompletionRequest', { prompt: ['Hello', [1, 2]], max_tokens: 4, logprobs: 1, return_token_offsets: true }],
    ['/v1/chat/completions/render', 'RenderChatCompletionRequest', { messages: [{ role: 'user', content: 'Hi' }], request_id: 'r-1', stream: true, response_format: { type: 'json_object' } }],
    ['/tokenize', 'TokenizeRequest', { prompt: 'Hello world', return_token_strs: true }],
    ['/tokenize', 'TokenizeRequest', { messages: [{ role: 'user', content: 'Hi' }] }],
    ['/detokenize', 'DetokenizeRequest', { tokens: [1, 2, 3] }],
    ['/v1/embeddings', 'EmbeddingRequest', { input: ['Hello world', 'two'], dimensions: 8 }],
    ['/v1/embeddings', 'EmbeddingRequest', { input: [[1, 2, 3]], encoding_format: 'base64' }],
    ['/embed', 'TeiEmbedRequest', { inputs: 'Hello world', truncate: true, truncation_direction: 'Left' }],
    ['/classify', 'ClassifyRequest', { model: 'cls', input: ['Hello world', 'two'] }],
    ['/predict', 'TeiPredictRequest', { model: 'cls', inputs: ['Hello', 'world'] }],
    ['/predict', 'TeiPredictRequest', { model: 'cls', inputs: [['Hello', 'world'], 'three'] }],
    ['/score', 'ScoreRequest', { model: 'rerank', text_1: 'Hello', text_2: ['world', 'two'] }],
    ['/v1/score', 'ScoreRequest', { model: 'embed', text_1: ['a', 'b'], text_2: ['c', 'd'] }],
    ['/v1/rerank', 'RerankRequest', { model: 'rerank', query: 'Hello', documents: ['world', { text: 'two' }], top_n: 1 }],
    ['/v2/rerank', 'RerankRequest', { model: 'embed', query: 'Hello', documents: ['world'], return_documents: false }],
    ['/rerank', 'TeiRerankRequest', { model: 'rerank', query: 'Hello', texts: ['world', 'two'], return_text: true }],
    ['/v1/token-classify', 'TokenClassifyRequest', { model: 'ner', input: ['Ann Lee', 'two'], ignore_labels: [] }],
    ['/v1/token-classify', 'TokenClassifyRequest', { input: 'Ann Lee', aggregation_strategy: 'none', offset_unit: 'utf16' }],
  ];
  for (const [route, requestSchema, body] of requests) {
    conforms(requestSchema, body);  // the document accepts what the server accepts
    const r = await postJson(route, body);
    assert.equal(r.status, 200, `${route}: ${r.text.slice(0, 300)}`);
    conformsTo(route, 'post', 200, r.body);
  }
  const streams = [
    ['/v1/completions', 'CompletionChunk', { prompt: 'Hello', max_tokens: 3, ignore_eos: true, logprobs: 1, stream: true, stream_options: { include_usage: true } }],
    ['/v1/chat/completions', 'ChatCompletionChunk', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, ignore_eos: true, logprobs: true, stream: true }],
    ['/v1/summarize', 'SummaryEvent', { text: 'Some text.', max_tokens: 3, ignore_eos: true, stream: true }],
  ];
  for (const [route, chunkSchema, body] of streams) {
    const r = await postJson(route, body);
    assert.equal(r.status, 200);
    const chunks = sseData(r.text);
    // Tokens ready together go out in one chunk: a fast model may send one.
    assert.ok(chunks.length >= 1, `${route}: ${r.text.slice(0, 500)}`);
    assert.ok(chunks.some((c) => c.finish_reason ?? c.choices?.some((ch) => ch.finish_reason)), `${route}: no finish_reason`);
    for (const c of chunks) conforms(chunkSchema, c);
  }
  // Errors: every declared error status has the Error shape.
  const bad = await postJson('/v1/completions', { prompt: 'x', temperature: -1 });
  assert.equal(bad.status, 400);
  conformsTo('/v1/completions', 'post', 400, bad.body);
  const unknown = await postJson('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], frobnicate: 1 });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.body.error.param, 'frobnicate');
  assert.throws(() => conforms('ChatCompletionRequest', { messages: [{ role: 'user', content: 'x' }], frobnicate: 1 }));
});

// ---- the openai SDK ----

test('openai SDK: models, completions, chat and streaming', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.equal(ids.length, 6, JSON.stringify(models.data));
  const tasks = models.data.map((m) => m.task).sort();
  assert.deepEqual(tasks, ['classify', 'embed', 'generate', 'question-answering', 'score', 'token_classify']);

  const c = await client.completions.create({ model: ids[0], prompt: 'Once upon', max_tokens: 5, temperature: 0, logprobs: 3 });
  assert.equal(c.choices.length, 1);
  assert.equal(c.usage.completion_tokens, c.choices[0].logprobs.tokens.length);
  const lp = c.choices[0].logprobs;
  assert.equal(lp.text_offset.length, lp.tokens.length);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 1; i < lp.tokens.length; i++) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + Buffer.byteLength(lp.tokens[i - 1]));
  // Up to logprobs + 1 entries: the sampled token is always listed (OpenAI).
  for (let i = 0; i < lp.tokens.length; i++) {
    const top = lp.top_logprobs[i];
    assert.ok(Object.keys(top).length >= 3 && Object.keys(top).length <= 4, JSON.stringify(top));
    assert.equal(top[lp.tokens[i]], lp.token_logprobs[i]);
  }

  const chat = await client.chat.completions.create({ messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  for (const e of content) {
    assert.deepEqual(Buffer.from(e.bytes).toString('utf8'), Buffer.from(e.token, 'utf8').toString('utf8'));
    assert.ok(e.top_logprobs.length <= 2 && e.top_logprobs.every((t) => Array.isArray(t.bytes)));
  }

  // Streaming joins to the unary text (greedy).
  const stream = await client.chat.completions.create({ messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) text += ch.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
});

test('openai SDK: echo with logprobs scores the prompt as lm-eval does', async () => {
  // lm-eval's local-completions loglikelihood: echo, max_tokens 1, logprobs 1.
  const prompt = 'The cat sat on the mat';
  const r = await client.completions.create({ prompt, echo: true, max_tokens: 1, logprobs: 1, temperature: 0 });
  const ch = r.choices[0];
  assert.ok(ch.text.startsWith(prompt), ch.text);
  const lp = ch.logprobs;
  const n = r.usage.prompt_tokens;
  assert.equal(lp.tokens.length, n + 1);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  for (let i = 1; i <= n; i++) {
    assert.equal(typeof lp.token_logprobs[i], 'number');
    assert.ok(lp.token_logprobs[i] <= 0);
    // The prompt's own token is among the listed ones, with the same logprob.
    if (i < n) assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);
  }
  assert.equal(lp.tokens.slice(0, n).join(''), prompt);
  // Scoring the prompt plus the generated token gives the generated token's logprob.
  const again = await client.completions.create({ prompt: prompt + lp.tokens[n], echo: true, max_tokens: 1, logprobs: 0, temperature: 0 });
  const tokens = again.choices[0].logprobs.tokens;
  if (tokens.length === n + 2 && tokens[n] === lp.tokens[n])
    assert.ok(Math.abs(again.choices[0].logprobs.token_logprobs[n] - lp.token_logprobs[n]) < 4e-3);
  // vLLM's prompt_logprobs on the same request.
  const v = await postJson('/v1/completions', { prompt, max_tokens: 1, prompt_logprobs: 2 });
  assert.equal(v.status, 200);
  conforms('Completion', v.body);
  const pl = v.body.choices[0].prompt_logprobs;
  assert.equal(pl.length, n);
  assert.equal(pl[0], null);
  assert.ok(Object.keys(pl[1]).length >= 2 && Object.keys(pl[1]).length <= 3);
});

test('openai SDK: logit_bias bans and forces tokens', async () => {
  const base = await client.completions.create({ prompt: 'The', max_tokens: 4, temperature: 0, return_token_ids: true });
  const first = base.choices[0].token_ids[0];
  const banned = await client.completions.create({ prompt: 'The', max_tokens: 4, temperature: 0, return_token_ids: true, logit_bias: { [first]: -100 } });
  assert.ok(!banned.choices[0].token_ids.includes(first), JSON.stringify(banned.choices[0].token_ids));
  const forced = await client.completions.create({ prompt: 'The', max_tokens: 4, temperature: 0, return_token_ids: true, logit_bias: { 7: 100 } });
  assert.deepEqual(forced.choices[0].token_ids, [7, 7, 7, 7]);
});

test('openai SDK: errors arrive as the SDK\'s exception classes', async () => {
  await assert.rejects(client.completions.create({ prompt: 'x', temperature: -1 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature' && e.type === 'invalid_request_error');
  await assert.rejects(client.completions.create({ prompt: 'x', max_tokens: 100000 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' && e.param === 'max_tokens');
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }), (e) =>
    e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  // Refused, never ignored.
  await assert.rejects(client.completions.create({ prompt: 'x', suffix: 'y', max_tokens: 1 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === 'suffix' && e.code === 'unsupported_parameter');
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], audio: { voice: 'alloy', format: 'wav' } }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === 'audio' && e.code === 'unsupported_parameter');
  const noKey = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(noKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
  const withKey = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-one', maxRetries: 0 });
  assert.equal((await withKey.models.list()).data.length, 1);
  // A server that runs one sequence and queues one: a burst gets 429s.
  const busy = new OpenAI({ baseURL: `${process.env.RS_BUSY_HTTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
    busy.completions.create({ prompt: 'x', max_tokens: 1000, ignore_eos: true })));
  const limited = results.filter((r) => r.status === 'rejected');
  assert.ok(limited.length >= 1, 'no request was refused');
  for (const r of limited) assert.ok(r.reason instanceof OpenAI.RateLimitError && r.reason.code === 'server_overloaded', String(r.reason));
  assert.ok(results.some((r) => r.status === 'fulfilled'));
});

test('chat history with tool calls and tool results renders', async () => {
  const r = await postJson('/tokenize', {
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '18 C' },
    ],
  });
  assert.equal(r.status, 200, r.text);
  const bad = await postJson('/v1/chat/completions', {
    messages: [{ role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'w', arguments: '{not json' } }] }],
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'messages[0].tool_calls[0].function.arguments');
});

test('tokenize and detokenize round-trip (vLLM shapes)', async () => {
  const t = await postJson('/tokenize', { prompt: 'Hello world', return_token_strs: true });
  assert.equal(t.status, 200);
  assert.equal(t.body.count, t.body.tokens.length);
  assert.equal(t.body.token_strs.length, t.body.tokens.length);
  const d = await postJson('/detokenize', { tokens: t.body.tokens });
  assert.equal(d.status, 200);
  assert.ok(d.body.prompt.endsWith('Hello world'), d.body.prompt);
  const bad = await postJson('/detokenize', { tokens: [1e9] });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'tokens');
});

// ---- LangChain ----

test('LangChain ChatOpenAI invokes and streams', async () => {
  const { ChatOpenAI } = await load('@langchain/openai/dist/index.js');
  const llm = new ChatOpenAI({ model: 'model', apiKey: 'unused', configuration: { baseURL: `${HTTP}/v1` }, maxTokens: 5, temperature: 0, maxRetries: 0 });
  const msg = await llm.invoke('Say hi');
  assert.equal(typeof msg.content, 'string');
  let streamed = '';
  for await (const chunk of await llm.stream('Say hi')) streamed += chunk.content;
  assert.equal(streamed, msg.content);
});

test('openai SDK and LangChain embeddings: float and base64 agree', async () => {
  // The SDK asks for base64 unless told otherwise, and decodes it.
  const b64 = await client.embeddings.create({ model: 'embed', input: ['Hello world', 'two words'] });
  const floats = await client.embeddings.create({ model: 'embed', input: ['Hello world', 'two words'], encoding_format: 'float' });
  assert.equal(b64.data.length, 2);
  assert.equal(floats.data[0].embedding.length, 64);
  for (let i = 0; i < 2; ++i) assert.deepEqual(Array.from(b64.data[i].embedding), floats.data[i].embedding);
  assert.ok(floats.usage.prompt_tokens > 4);
  const cut = await client.embeddings.create({ model: 'embed', input: 'Hello world', dimensions: 16, encoding_format: 'float' });
  assert.equal(cut.data[0].embedding.length, 16);
  const norm = cut.data[0].embedding.reduce((a, x) => a + x * x, 0);
  assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  await assert.rejects(client.embeddings.create({ model: 'embed', input: '' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  const { OpenAIEmbeddings } = await load('@langchain/openai/dist/index.js');
  const lc = new OpenAIEmbeddings({ model: 'embed', apiKey: 'unused', configuration: { baseURL: `${HTTP}/v1` }, maxRetries: 0 });
  const docs = await lc.embedDocuments(['Hello world', 'two words']);
  assert.equal(docs.length, 2);
  for (let i = 0; i < 2; ++i) {
    for (let d = 0; d < 64; ++d) assert.ok(Math.abs(docs[i][d] - floats.data[i].embedding[d]) < 1e-6, `doc ${i} dim ${d}`);
  }
  const query = await lc.embedQuery('Hello world');
  assert.equal(query.length, 64);
});

test('cohere-ai SDK and LangChain CohereRerank against /v1/rerank and /v2/rerank', async () => {
  const { CohereClient, CohereClientV2 } = require('cohere-ai');
  const { CohereRerank } = await load('@langchain/cohere/dist/index.js');
  const { Document } = await load('@langchain/core/dist/documents/index.js');
  const query = 'where is the owl';
  const docs = ['the owl sleeps in the oak', 'markets open at dawn', 'rain on the hills'];
  const raw = await postJson('/v1/rerank', { model: 'rerank', query, documents: docs, top_n: 2 });
  assert.equal(raw.status, 200, raw.text);
  const expected = raw.body.results.map((r) => [r.index, r.relevance_score]);
  const v1 = new CohereClient({ token: 'unused', environment: HTTP });
  const r1 = await v1.rerank({ model: 'rerank', query, documents: docs, topN: 2 });
  assert.deepEqual(r1.results.map((r) => [r.index, r.relevanceScore]), expected);
  const v2 = new CohereClientV2({ token: 'unused', environment: HTTP });
  const r2 = await v2.rerank({ model: 'rerank', query, documents: docs, topN: 2 });
  assert.deepEqual(r2.results.map((r) => [r.index, r.relevanceScore]), expected);
  // An embedder reranks too (cosine), through the same SDK.
  const cos = await v2.rerank({ model: 'embed', query, documents: docs });
  assert.equal(cos.results.length, 3);
  // LangChain's retriever compressor on the v1 client.
  const lc = new CohereRerank({ client: v1, model: 'rerank', topN: 2 });
  const ranked = await lc.rerank(docs, query);
  assert.deepEqual(ranked.map((r) => [r.index, r.relevanceScore]), expected);
  const kept = await lc.compressDocuments(docs.map((d) => new Document({ pageContent: d })), query);
  assert.deepEqual(kept.map((d) => [d.pageContent, d.metadata.relevanceScore]), expected.map(([i, s]) => [docs[i], s]));
  // Errors arrive as the SDK's error class with our status.
  await assert.rejects(v2.rerank({ model: 'cls', query, documents: docs }), (e) => e.statusCode === 400);
});

// ---- gRPC through reflection ----

function reflectionClient() {
  const def = protoLoader.loadSync(path.join(ROOT, 'tests/e2e/protos/reflection.proto'), { keepCase: true });
  const pkg = grpc.loadPackageDefinition(def);
  return new pkg.grpc.reflection.v1alpha.ServerReflection(process.env.RS_GRPC, grpc.credentials.createInsecure());
}
function reflect(stub, request) {
  return new Promise((resolve, reject) => {
    const call = stub.ServerReflectionInfo();
    call.on('data', (r) => { resolve(r); call.end(); });
    call.on('error', reject);
    call.write(request);
  });
}

test('grpc-js finds the service through reflection and calls it', async () => {
  const refl = reflectionClient();
  const listed = await reflect(refl, { list_services: '' });
  const names = listed.list_services_response.service.map((s) => s.name);
  assert.ok(names.includes('ropeserve.v1.Inference'), names.join(','));
  const files = await reflect(refl, { file_containing_symbol: 'ropeserve.v1.Inference' });
  // FileDescriptorSet { repeated FileDescriptorProto file = 1; }, built from
  // the serialized files the server sent.
  const parts = [];
  for (const fd of files.file_descriptor_response.file_descriptor_proto) {
    const w = protobuf.Writer.create();
    w.uint32(10).bytes(fd);
    parts.push(Buffer.from(w.finish()));
  }
  const def = protoLoader.loadFileDescriptorSetFromBuffer(Buffer.concat(parts), { keepCase: true, longs: Number });
  const Inference = grpc.loadPackageDefinition(def).ropeserve.v1.Inference;
  const stub = new Inference(process.env.RS_GRPC, grpc.credentials.createInsecure());
  const call = (method, req) => new Promise((resolve, reject) =>
    stub[method](req, (err, res) => (err ? reject(err) : resolve(res))));

  const sum = await call('Summarize', { text: 'The committee met and agreed on the budget.', max_tokens: 4 });
  assert.equal(typeof sum.summary, 'string');
  const ans = await call('Answer', { question: 'Who met?', context: 'The committee met on Tuesday.' });
  assert.ok(Array.isArray(ans.answers) && ans.answers.length >= 1, JSON.stringify(ans));
  const messages = await new Promise((resolve, reject) => {
    const out = [];
    const s = stub.Generate({ prompt: 'Hello', max_tokens: 3 });
    s.on('data', (m) => out.push(m));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
  assert.ok(messages.length >= 1);
  assert.ok(messages.at(-1).finish_reason, JSON.stringify(messages.at(-1)));

  // Errors carry google.rpc details (AIP-193): BadRequest names the field.
  const err = await call('Summarize', { text: 'x', max_tokens: 100000 }).then(() => null, (e) => e);
  assert.ok(err, 'no error');
  assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
  const raw = err.metadata.get('grpc-status-details-bin');
  assert.equal(raw.length, 1);
  const root = protobuf.loadSync([path.join(ROOT, 'proto/google/rpc/status.proto'), path.join(ROOT, 'proto/google/rpc/error_details.proto')]);
  const status = root.lookupType('google.rpc.Status').decode(raw[0]);
  assert.equal(status.code, grpc.status.INVALID_ARGUMENT);
  const byType = Object.fromEntries(status.details.map((a) => [a.type_url ?? a.typeUrl, a.value]));
  assert.ok(byType['type.googleapis.com/google.rpc.BadRequest'], JSON.stringify(status.toJSON()));
  const bad = root.lookupType('google.rpc.BadRequest').decode(byType['type.googleapis.com/google.rpc.BadRequest']);
  assert.equal(bad.fieldViolations[0].field, 'max_tokens');
  const info = root.lookupType('google.rpc.ErrorInfo').decode(byType['type.googleapis.com/google.rpc.ErrorInfo']);
  assert.equal(info.reason, 'context_length_exceeded');
  refl.close();
  stub.close();
});
