// OpenAI's Files API (/v1/files) through the official openai SDK:
// files.create uploads a batch input file as multipart/form-data the way
// the SDK builds it; list (auto-paginated), retrieve, content and delete;
// a bad file is a BadRequestError naming its lines; files belong to their
// API key. Every object validated against docs/openapi.json. Run with
// `node --test` by clients_e2e.py (each server has its own --data-dir).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HTTP, load, openApi } from './lib.mjs';

const { default: OpenAI, toFile } = await load('openai/index.mjs');
const client = new OpenAI({ baseURL: `${HTTP}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const { conforms } = openApi();

const line = (custom_id, url, body) => JSON.stringify({ custom_id, method: 'POST', url, body });
const GOOD = [
  line('chat-1', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 }),
  line('sum-1', '/v1/summarize', { text: 'A short text to summarize.' }),
  line('qa-1', '/v1/qa', { question: 'Who?', context: 'Ada did.' }),
].join('\n') + '\n';

test('openai SDK: files.create, list, retrieve, content and delete', async () => {
  const created = await client.files.create({ file: await toFile(Buffer.from(GOOD), 'requests.jsonl'), purpose: 'batch' });
  conforms('FileObject', created);
  assert.equal(created.filename, 'requests.jsonl');
  assert.equal(created.bytes, Buffer.byteLength(GOOD));
  assert.equal(created.purpose, 'batch');
  const second = await client.files.create({ file: await toFile(Buffer.from(GOOD), 'again.jsonl'), purpose: 'batch' });
  const listed = [];
  for await (const f of client.files.list({ purpose: 'batch', limit: 1 })) listed.push(f.id);
  assert.ok(listed.indexOf(second.id) < listed.indexOf(created.id), 'newest first');
  assert.ok(listed.includes(created.id));
  assert.deepEqual(await client.files.retrieve(created.id), created);
  const content = await client.files.content(created.id);
  assert.equal(await content.text(), GOOD);
  const deleted = await client.files.delete(created.id);
  assert.deepEqual(deleted, { id: created.id, object: 'file', deleted: true });
  await assert.rejects(client.files.retrieve(created.id), OpenAI.NotFoundError);
  await client.files.delete(second.id);
});

test('openai SDK: a bad batch file is refused naming its lines', async () => {
  const bad = [line('a', '/v1/chat/completions', { messages: [] }), line('a', '/v1/qa', { question: 'q', context: 'c' }), 'nonsense'].join('\n');
  await assert.rejects(client.files.create({ file: await toFile(Buffer.from(bad), 'bad.jsonl'), purpose: 'batch' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.param, 'file');
    for (const n of [1, 2, 3]) assert.match(e.message, new RegExp(`line ${n}: `));
    return true;
  });
  await assert.rejects(client.files.create({ file: await toFile(Buffer.from(GOOD), 'x.jsonl'), purpose: 'fine-tune' }), OpenAI.BadRequestError);
});

test('openai SDK: files belong to their API key', async () => {
  const one = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-one', maxRetries: 0 });
  const two = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-two', maxRetries: 0 });
  const mine = await one.files.create({ file: await toFile(Buffer.from(GOOD), 'mine.jsonl'), purpose: 'batch' });
  assert.equal((await one.files.retrieve(mine.id)).id, mine.id);
  await assert.rejects(two.files.retrieve(mine.id), OpenAI.NotFoundError);
  await assert.rejects(two.files.content(mine.id), OpenAI.NotFoundError);
  const theirs = [];
  for await (const f of two.files.list()) theirs.push(f.id);
  assert.ok(!theirs.includes(mine.id));
  await one.files.delete(mine.id);
});
