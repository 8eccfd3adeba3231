// OpenAI's Batch API (/v1/batches) through the official openai SDK, on a
// server of its own (RS_BATCH_HTTP: --batch-max-in-flight 1, no other
// traffic): files.create, batches.create, retrieve until done,
// files.content of the output; 1,000 lines whose results are the same as
// the same requests sent online (greedy; each line runs alone, as each
// online request does, and the prompts are shorter than a KV block, so no
// line reads another's cache). Then cancel, list, and batches belonging to
// their API key. Every object validated against docs/openapi.json. Run
// with `node --test` by clients_e2e.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load, openApi } from './lib.mjs';

const { default: OpenAI, toFile } = await load('openai/index.mjs');
const BASE = process.env.RS_BATCH_HTTP;
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const { conforms } = openApi();

const line = (custom_id, body) => JSON.stringify({ custom_id, method: 'POST', url: '/v1/completions', body });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function upload(c, lines, name = 'requests.jsonl') {
  return c.files.create({ file: await toFile(Buffer.from(lines.join('\n') + '\n'), name), purpose: 'batch' });
}

async function finished(c, id) {
  for (;;) {
    const b = await c.batches.retrieve(id);
    conforms('Batch', b);
    if (['completed', 'failed', 'expired', 'cancelled'].includes(b.status)) return b;
    await sleep(200);
  }
}

async function jsonl(c, fileId) {
  const text = await (await c.files.content(fileId)).text();
  return text.trimEnd().split('\n').map((l) => JSON.parse(l));
}

test('openai SDK: a 1,000-line batch gives what the same requests give online', async () => {
  const N = 1000;
  const body = (i) => ({ model: 'model', prompt: `${i}`, max_tokens: 6, temperature: 0, ignore_eos: true });
  const input = await upload(client, Array.from({ length: N }, (_, i) => line(`req-${i}`, body(i))));
  const created = await client.batches.create({
    input_file_id: input.id, endpoint: '/v1/completions', completion_window: '24h', metadata: { job: 'sdk-test' },
  });
  conforms('Batch', created);
  assert.equal(created.status, 'validating');
  assert.deepEqual(created.metadata, { job: 'sdk-test' });
  const done = await finished(client, created.id);
  assert.equal(done.status, 'completed', JSON.stringify(done.errors));
  assert.deepEqual(done.request_counts, { total: N, completed: N, failed: 0 });
  assert.equal(done.error_file_id, null);
  for (const t of ['in_progress_at', 'finalizing_at', 'completed_at']) assert.ok(done[t] >= done.created_at, t);
  const out = await jsonl(client, done.output_file_id);
  assert.equal(out.length, N);
  conforms('FileObject', await client.files.retrieve(done.output_file_id));
  for (let i = 0; i < N; ++i) {
    const r = out[i];
    assert.equal(r.custom_id, `req-${i}`, 'in input order');
    assert.match(r.id, /^batch_req_/);
    assert.equal(r.error, null);
    assert.equal(r.response.status_code, 200);
    assert.equal(r.response.request_id, r.response.body.id);
  }
  // The same requests online, one at a time.
  const model = 'model';
  for (let i = 0; i < N; ++i) {
    const online = await client.completions.create({ ...body(i), model });
    const batched = out[i].response.body;
    assert.equal(batched.choices[0].text, online.choices[0].text, `req-${i}`);
    assert.deepEqual(batched.usage, online.usage, `req-${i}`);
  }
});

test('openai SDK: batches.cancel, list, and batches belonging to their API key', async () => {
  const lines = Array.from({ length: 60 }, (_, i) => line(`c-${i}`, { prompt: `${i}`, max_tokens: 200, ignore_eos: true }));
  const input = await upload(client, lines);
  const b = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/completions', completion_window: '24h' });
  const cancelling = await client.batches.cancel(b.id);
  conforms('Batch', cancelling);
  assert.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
  const cancelled = await finished(client, b.id);
  assert.equal(cancelled.status, 'cancelled');
  const errors = cancelled.error_file_id ? await jsonl(client, cancelled.error_file_id) : [];
  const outputs = cancelled.output_file_id ? await jsonl(client, cancelled.output_file_id) : [];
  assert.equal(errors.length + outputs.length, 60, 'every line reported once');
  const notRun = errors.filter((e) => e.response === null);
  for (const e of notRun) assert.equal(e.error.code, 'batch_cancelled');
  assert.equal(cancelled.request_counts.completed, outputs.length);
  assert.equal(notRun.length, 60 - cancelled.request_counts.completed - cancelled.request_counts.failed);
  // Cancelling a cancelled batch changes nothing.
  assert.equal((await client.batches.cancel(b.id)).status, 'cancelled');
  const listed = [];
  for await (const x of client.batches.list({ limit: 1 })) listed.push(x.id);
  assert.ok(listed.indexOf(b.id) >= 0 && listed.indexOf(b.id) < listed.length, 'auto-paginated');
  await assert.rejects(client.batches.create({ input_file_id: input.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'endpoint');
  await assert.rejects(client.batches.create({ input_file_id: 'file-nope', endpoint: '/v1/completions', completion_window: '24h' }),
    (e) => e.param === 'input_file_id');

  const one = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-one', maxRetries: 0 });
  const two = new OpenAI({ baseURL: `${process.env.RS_AUTH_HTTP}/v1`, apiKey: 'secret-two', maxRetries: 0 });
  const mine = await upload(one, [line('a', { prompt: 'x', max_tokens: 2 })]);
  await assert.rejects(two.batches.create({ input_file_id: mine.id, endpoint: '/v1/completions', completion_window: '24h' }),
    (e) => e instanceof OpenAI.NotFoundError || e instanceof OpenAI.BadRequestError);
  const ours = await one.batches.create({ input_file_id: mine.id, endpoint: '/v1/completions', completion_window: '24h' });
  await assert.rejects(two.batches.retrieve(ours.id), OpenAI.NotFoundError);
  await assert.rejects(two.batches.cancel(ours.id), OpenAI.NotFoundError);
  const theirs = [];
  for await (const x of two.batches.list()) theirs.push(x.id);
  assert.ok(!theirs.includes(ours.id));
  const done = await finished(one, ours.id);
  assert.equal(done.status, 'completed');
  await assert.rejects(two.files.content(done.output_file_id), OpenAI.NotFoundError);
  // A completed batch cannot be cancelled.
  await assert.rejects(one.batches.cancel(done.id), OpenAI.BadRequestError);
});
