// The web playground (GET /) in a real browser: Debian's chromium driven
// by puppeteer-core, against the servers clients_e2e.py started.
//  - the page loads under its Content-Security-Policy with no console
//    error and no CSP violation; tabs work from the keyboard;
//  - Summarize streams a document longer than the context: the progress
//    bar reaches its chunk count, the summary appears, usage shows chunks;
//  - Ask highlights each answer at the offsets the API gave, in the right
//    passage (UTF-16 offsets around an astral emoji);
//  - Chat streams a reply, over chat completions and then Anthropic's Messages;
//  - the server panel shows numbers from /metrics;
//  - with API keys: nothing works without the key, everything with it.
// On failure a screenshot goes to $RS_OUT. With RS_SCREENSHOT=path it also
// writes the README's screenshot there.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const nodeModules = process.env.NODE_MODULES_DIR;
const load = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
const HTTP = process.env.RS_HTTP;
const AUTH_HTTP = process.env.RS_AUTH_HTTP;
const ROOT = process.env.RS_ROOT;
const OUT = process.env.RS_OUT;
const { default: puppeteer } = await load('puppeteer-core/lib/esm/puppeteer/puppeteer-core.js');

const GPL = fs.readFileSync(path.join(ROOT, 'tests/data/text/gpl-3.txt'), 'utf8');

let browser;
let problems = [];  // console errors and CSP violations of the current page

before(async () => {
  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
});
after(async () => { await browser?.close(); });

async function open(base, t) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 820 });
  problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(String(e)));
  const r = await page.goto(`${base}/`, { waitUntil: 'networkidle0' });
  t.after(() => page.close());
  return { page, response: r };
}

// Runs `fn` and saves a screenshot when it throws (node:test has no
// per-test failure hook that still sees the page).
async function withShot(page, name, fn) {
  try {
    await fn();
  } catch (err) {
    if (OUT) {
      fs.mkdirSync(OUT, { recursive: true });
      await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true }).catch(() => {});
    }
    throw err;
  }
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

test('the page loads under a strict CSP, and its tabs work from the keyboard', async (t) => {
  const { page, response } = await open(HTTP, t);
  await withShot(page, 'load', async () => {
    const csp = response.headers()['content-security-policy'];
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    await page.waitForFunction(() => !document.getElementById('model-info').textContent.includes('connecting'));
    assert.match(await text(page, '#model-info'), /model/);
    // Every form control has a label.
    const unlabeled = await page.$$eval('input, textarea, select', (els) =>
      els.filter((e) => !e.labels?.length && !e.getAttribute('aria-label')).map((e) => e.id));
    assert.deepEqual(unlabeled, []);
    await page.focus('#tab-summarize');
    await page.keyboard.press('ArrowRight');
    assert.equal(await page.$eval('#panel-qa', (e) => e.hidden), false);
    assert.equal(await page.$eval('#panel-summarize', (e) => e.hidden), true);
    assert.equal(await page.evaluate(() => document.activeElement.id), 'tab-qa');
    await page.keyboard.press('End');
    assert.equal(await page.$eval('#panel-chat', (e) => e.hidden), false);
    assert.deepEqual(problems, []);
  });
});

test('Summarize streams a long document through map-reduce with progress', async (t) => {
  const { page } = await open(HTTP, t);
  await withShot(page, 'summarize', async () => {
    const doc = [GPL, GPL].join('\n\n');  // ~11,000 words: far past the demo model's 2,048 tokens
    await page.$eval('#sum-text', (e, v) => { e.value = v; }, doc);
    await page.select('#sum-style', 'bullets');
    await page.$eval('#sum-max-tokens', (e) => { e.value = '24'; });
    await page.type('#sum-focus', 'licences');
    // Record the progress bar as the events arrive.
    await page.evaluate(() => {
      window.seen = [];
      new MutationObserver(() => window.seen.push(document.getElementById('sum-status').textContent))
        .observe(document.getElementById('sum-status'), { childList: true, characterData: true, subtree: true });
    });
    await page.click('#sum-go');
    await page.waitForFunction(() => document.getElementById('sum-status').textContent.startsWith('done'),
                               { timeout: 120000 });
    // The observer sees the text at each of its callbacks: progress events
    // that arrive in one batch (chunks finishing in the same engine step)
    // show as their last one, so only the order and the end are certain.
    const seen = await page.evaluate(() => window.seen);
    const maps = seen.filter((s) => s.startsWith('map: '));
    assert.ok(maps.length >= 1, `no progress shown before the end: ${seen.slice(0, 5)}`);
    const total = Number(maps[0].split('/')[1]);
    const done = maps.map((s) => Number(s.slice(5).split('/')[0]));
    assert.ok(total > 1 && done.every((n, i) => n >= 1 && n <= total && (i === 0 || n >= done[i - 1])),
              `map progress out of order: ${maps}`);
    assert.equal(await page.$eval('#sum-progress', (e) => e.value === e.max), true);
    assert.ok((await text(page, '#sum-output')).length > 0, 'no summary text');
    assert.match(await text(page, '#sum-status'), /map_reduce/);
    assert.match(await text(page, '#sum-usage'), new RegExp(`${total} chunks`));
    assert.deepEqual(problems, []);
    if (process.env.RS_SCREENSHOT) await page.screenshot({ path: process.env.RS_SCREENSHOT });
  });
});

test('Ask highlights each answer at its offsets in its passage', async (t) => {
  const { page } = await open(HTTP, t);
  await withShot(page, 'ask', async () => {
    await page.click('#tab-qa');
    const passages = ['Alice met Bob in Paris on Monday.',
                      'The \u{1F600} council voted seven to two on the new budget for parks.',
                      'Carol wrote the report about river levels.'];
    await page.type('#qa-question', 'How did the council vote?');
    await page.$eval('#qa-passage-0', (e, v) => { e.value = v; }, passages[0]);
    for (let i = 1; i < passages.length; ++i) {
      await page.click('#qa-add');
      await page.$eval(`#qa-passage-${i}`, (e, v) => { e.value = v; }, passages[i]);
    }
    await page.click('#qa-go');
    await page.waitForFunction(() => document.getElementById('qa-status').textContent.includes('answers from'));
    // The same request straight to the API: the page shows exactly its answers.
    const r = await fetch(`${HTTP}/v1/qa`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ question: 'How did the council vote?', contexts: passages, offset_unit: 'utf16', top_k: 3 }) });
    const api = await r.json();
    const shown = await page.$$eval('#qa-results li', (lis) => lis.map((li) => ({
      passage: li.dataset.passage, start: Number(li.dataset.start), end: Number(li.dataset.end),
      mark: li.querySelector('mark')?.textContent ?? null, answer: li.querySelector('strong').textContent })));
    assert.equal(shown.length, api.answers.length);
    assert.ok(shown.length >= 1);
    for (let i = 0; i < shown.length; ++i) {
      const a = api.answers[i];
      assert.equal(shown[i].passage, String(a.passage));
      assert.equal(shown[i].start, a.start);
      // The highlight is the answer: UTF-16 offsets are what JavaScript slices by.
      assert.equal(shown[i].mark, a.answer);
      assert.equal(shown[i].mark, passages[a.passage].slice(a.start, a.end));
    }
    // Retrieval first: the page shows both scores, as the API returns them.
    await page.$eval('#qa-retrieve', (e) => { e.value = '2'; });
    await page.$eval('#qa-status', (e) => { e.textContent = ''; });
    await page.click('#qa-go');
    await page.waitForFunction(() => document.getElementById('qa-status').textContent.includes('answers from 2 of 3'));
    const r2 = await fetch(`${HTTP}/v1/qa`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ question: 'How did the council vote?', contexts: passages, offset_unit: 'utf16', top_k: 3,
                             scoring: 'pipeline', retrieve: { top_k: 2 } }) });
    const api2 = await r2.json();
    const shown2 = await page.$$eval('#qa-results li', (lis) => lis.map((li) => ({
      passage: li.dataset.passage, retrieval: li.dataset.retrieval })));
    assert.equal(shown2.length, api2.answers.length);
    for (let i = 0; i < shown2.length; ++i) {
      assert.equal(shown2[i].passage, String(api2.answers[i].passage));
      assert.equal(Number(shown2[i].retrieval), api2.answers[i].retrieval_score);
    }
    assert.deepEqual(problems, []);
  });
});

test('Chat streams a reply, and the server panel shows /metrics', async (t) => {
  const { page } = await open(HTTP, t);
  await withShot(page, 'chat', async () => {
    await page.click('#tab-chat');
    await page.type('#chat-input', 'Hello there');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('chat-status').textContent.startsWith('done'),
                               { timeout: 60000 });
    assert.equal(await page.$$eval('#chat-log p', (ps) => ps.length), 2);
    assert.equal(await text(page, '#chat-log p.user'), 'Hello there');
    // The same conversation goes on over Anthropic's Messages API.
    await page.select('#chat-api', 'messages');
    await page.$eval('#chat-status', (e) => { e.textContent = ''; });
    await page.type('#chat-input', 'And again');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => /^done \((end_turn|max_tokens)\)$/.test(document.getElementById('chat-status').textContent),
                               { timeout: 60000 });
    assert.equal(await page.$$eval('#chat-log p', (ps) => ps.length), 4);
    assert.equal(await page.$eval('#chat-status', (e) => e.classList.contains('error')), false);
    // And over OpenAI's Responses API.
    await page.select('#chat-api', 'responses');
    await page.$eval('#chat-status', (e) => { e.textContent = ''; });
    await page.type('#chat-input', 'Once more');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => /^done \((completed|incomplete)\)$/.test(document.getElementById('chat-status').textContent),
                               { timeout: 60000 });
    assert.equal(await page.$$eval('#chat-log p', (ps) => ps.length), 6);
    assert.equal(await page.$eval('#chat-status', (e) => e.classList.contains('error')), false);
    await page.waitForFunction(() => document.getElementById('m-tps').textContent !== '-', { timeout: 10000 });
    assert.match(await text(page, '#m-running'), /^\d+$/);
    assert.match(await text(page, '#m-kv'), /%$/);
    // The Batch API's progress (the server has a data directory).
    assert.match(await text(page, '#m-batch'), /^\d+ running, \d+ pending, \d+ done, \d+ failed$/);
    assert.deepEqual(problems, []);
  });
});

test('with API keys the page works only with the key', async (t) => {
  const { page } = await open(AUTH_HTTP, t);
  await withShot(page, 'auth', async () => {
    await page.waitForFunction(() => document.getElementById('model-info').textContent.includes('API key'));
    await page.$eval('#sum-text', (e) => { e.value = 'A short note about the council.'; });
    await page.$eval('#sum-max-tokens', (e) => { e.value = '4'; });
    await page.click('#sum-go');
    await page.waitForFunction(() => document.getElementById('sum-status').classList.contains('error'));
    assert.match(await text(page, '#sum-status'), /401/);
    await page.type('#api-key', 'secret-one');
    await page.$eval('#api-key', (e) => e.dispatchEvent(new Event('change')));
    await page.waitForFunction(() => !document.getElementById('model-info').classList.contains('error'));
    await page.click('#sum-go');
    await page.waitForFunction(() => document.getElementById('sum-status').textContent.startsWith('done'));
    // The browser reports the 401 fetches as console errors: expected here.
    problems = problems.filter((p) => !/401/.test(p));
    assert.deepEqual(problems, []);
  });
});
