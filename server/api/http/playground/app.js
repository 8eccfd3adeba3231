// The ropeserve playground: summarize, ask, chat and watch the server,
// over the same REST API any client uses (docs/api.md). Plain JavaScript,
// no dependencies, no inline code (the page is served with a strict
// Content-Security-Policy). Untrusted text is only ever set as textContent.
'use strict';

const $ = (id) => document.getElementById(id);

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorOf(r) {
  try {
    const body = await r.json();
    return `${r.status}: ${body.error?.message ?? JSON.stringify(body)}`;
  } catch {
    return `HTTP ${r.status}`;
  }
}

// POST `body` with stream: true; onEvent(object) per `data:` event (an
// Anthropic stream's `event:` lines are redundant with its data's type).
async function stream(path, body, onEvent) {
  const r = await fetch(path, { method: 'POST', headers: headers(), body: JSON.stringify({ ...body, stream: true }) });
  if (!r.ok) throw new Error(await errorOf(r));
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        const event = JSON.parse(data);
        if (event.error) throw new Error(event.error.message);
        onEvent(event);
      }
    }
  }
}

async function post(path, body) {
  const r = await fetch(path, { method: 'POST', headers: headers(), body: JSON.stringify(body) });
  if (!r.ok) throw new Error(await errorOf(r));
  return r.json();
}

function setStatus(el, text, isError = false) {
  el.textContent = text;
  el.classList.toggle('error', isError);
}

async function busy(button, work) {
  button.disabled = true;
  try {
    await work();
  } finally {
    button.disabled = false;
  }
}

// ---- tabs (arrow keys move between them, as the ARIA tabs pattern) ----

function selectTab(tab) {
  for (const t of document.querySelectorAll('[role="tab"]')) {
    const on = t === tab;
    t.setAttribute('aria-selected', String(on));
    t.tabIndex = on ? 0 : -1;
    $(t.getAttribute('aria-controls')).hidden = !on;
  }
  tab.focus();
}

function setUpTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  tabs.forEach((tab, i) => {
    tab.addEventListener('click', () => selectTab(tab));
    tab.addEventListener('keydown', (e) => {
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (next === undefined) return;
      e.preventDefault();
      selectTab(tabs[(next + tabs.length) % tabs.length]);
    });
  });
}

// ---- summarize ----

async function summarize() {
  const out = $('sum-output'), status = $('sum-status'), progress = $('sum-progress');
  out.textContent = '';
  $('sum-usage').textContent = '';
  progress.value = 0;
  setStatus(status, 'working...');
  const body = { text: $('sum-text').value, style: $('sum-style').value, strategy: $('sum-strategy').value,
                 max_tokens: Number($('sum-max-tokens').value) || undefined };
  if ($('sum-focus').value.trim()) body.focus = $('sum-focus').value.trim();
  if ($('sum-language').value.trim()) body.language = $('sum-language').value.trim();
  try {
    await stream('/v1/summarize', body, (e) => {
      if (e.event === 'progress') {
        progress.max = e.chunks_total;
        progress.value = e.chunks_done;
        setStatus(status, `${e.phase}: ${e.chunks_done} / ${e.chunks_total}`);
      } else if (e.delta !== undefined) {
        out.textContent += e.delta;
      } else if (e.finish_reason !== undefined) {
        const u = e.usage;
        setStatus(status, `done (${e.strategy}, ${e.finish_reason})`);
        $('sum-usage').textContent = `${u.prompt_tokens} prompt + ${u.completion_tokens} generated tokens` +
          (u.chunks ? `, ${u.chunks} chunks` : '');
      }
    });
  } catch (err) {
    setStatus(status, err.message, true);
  }
}

// ---- question answering over passages ----

function addPassage() {
  const box = $('qa-passages');
  const n = box.querySelectorAll('textarea').length;
  const label = document.createElement('label');
  label.htmlFor = `qa-passage-${n}`;
  label.textContent = `Passage ${n + 1}`;
  const area = document.createElement('textarea');
  area.id = `qa-passage-${n}`;
  area.className = 'qa-passage';
  area.rows = 4;
  box.append(label, area);
  area.focus();
}

async function ask() {
  const status = $('qa-status'), list = $('qa-results');
  list.textContent = '';
  const passages = [...document.querySelectorAll('.qa-passage')].map((t) => t.value).filter((t) => t.trim());
  setStatus(status, 'working...');
  try {
    // UTF-16 offsets: what String.prototype.slice counts.
    const body = { question: $('qa-question').value, contexts: passages, offset_unit: 'utf16',
                   top_k: Number($('qa-top-k').value) || 1, scoring: $('qa-scoring').value };
    // Retrieval first: an encoder ranks the passages, the QA model reads the best N.
    const best = Number($('qa-retrieve').value) || 0;
    if (best > 0) body.retrieve = { top_k: best };
    const r = await post('/v1/qa', body);
    for (const a of r.answers) {
      const li = document.createElement('li');
      li.dataset.passage = a.passage ?? '';
      li.dataset.start = a.start;
      li.dataset.end = a.end;
      const head = document.createElement('p');
      const strong = document.createElement('strong');
      strong.textContent = a.answer || '(no answer)';
      li.dataset.retrieval = a.retrieval_score ?? '';
      head.append(strong, ` score ${a.score.toPrecision(3)}` + (a.passage != null ? `, passage ${a.passage + 1}` : '') +
                  (a.retrieval_score != null ? `, retrieval ${a.retrieval_score.toPrecision(3)}` : ''));
      li.append(head);
      if (a.passage != null) {
        const text = passages[a.passage];
        const p = document.createElement('p');
        p.className = 'passage';
        const mark = document.createElement('mark');
        mark.textContent = text.slice(a.start, a.end);
        p.append(text.slice(0, a.start), mark, text.slice(a.end));
        li.append(p);
      }
      list.append(li);
    }
    const read = r.retrieved ? `${r.retrieved.length} of ${passages.length} passages, ranked by ${r.retrieval_model}`
                             : `${passages.length} passages`;
    setStatus(status, `${r.answers.length} answers from ${read} (${r.usage.windows} windows)`);
  } catch (err) {
    setStatus(status, err.message, true);
  }
}

// ---- chat ----

let history = [];

function chatLine(cls, text) {
  const p = document.createElement('p');
  p.className = cls;
  p.textContent = text;
  $('chat-log').append(p);
  return p;
}

// The name of the model that generates (Anthropic's API needs it in the body).
async function generatorModel() {
  const r = await fetch('/v1/models', { headers: headers() });
  if (!r.ok) throw new Error(await errorOf(r));
  const m = (await r.json()).data.find((x) => x.task === 'generate');
  if (!m) throw new Error('this server has no generating model');
  return m.id;
}

// One turn over the API the selector names: OpenAI's chat completions,
// OpenAI's Responses (typed events: output_text.delta, then completed or
// incomplete; store: false, the history is sent each turn) or Anthropic's
// Messages (text_delta, message_delta). The history is the same list of
// {role, content} strings for all three.
async function streamTurn(onText, onDone) {
  if ($('chat-api').value === 'responses') {
    await stream('/v1/responses', { input: history, max_output_tokens: 256, store: false }, (e) => {
      if (e.type === 'response.output_text.delta') onText(e.delta);
      if (e.type === 'response.completed' || e.type === 'response.incomplete') onDone(e.response.status);
      if (e.type === 'response.failed') throw new Error(e.response.error?.message ?? 'the response failed');
    });
    return;
  }
  if ($('chat-api').value === 'messages') {
    const model = await generatorModel();
    await stream('/v1/messages', { model, messages: history, max_tokens: 256 }, (e) => {
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') onText(e.delta.text);
      if (e.type === 'message_delta') onDone(e.delta.stop_reason);
    });
    return;
  }
  await stream('/v1/chat/completions', { messages: history, max_tokens: 256 }, (e) => {
    const delta = e.choices?.[0]?.delta?.content;
    if (delta) onText(delta);
    const reason = e.choices?.[0]?.finish_reason;
    if (reason) onDone(reason);
  });
}

async function sendChat() {
  const input = $('chat-input');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  history.push({ role: 'user', content: text });
  chatLine('user', text);
  const reply = chatLine('assistant', '');
  setStatus($('chat-status'), 'generating...');
  try {
    let content = '';
    await streamTurn(
      (delta) => {
        content += delta;
        reply.textContent = content;
      },
      (reason) => setStatus($('chat-status'), `done (${reason})`),
    );
    history.push({ role: 'assistant', content });
  } catch (err) {
    history.pop();
    reply.remove();
    setStatus($('chat-status'), err.message, true);
  }
}

// ---- server panel: /metrics every 2 s ----

let lastTokens = null;

async function pollMetrics() {
  try {
    const r = await fetch('/metrics');
    if (!r.ok) return;
    const values = {};
    const batchLines = {};  // state -> lines of unfinished batches (the Batch API)
    for (const line of (await r.text()).split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const name = line.split(/[{ ]/, 1)[0];
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      values[name] = (values[name] ?? 0) + value;
      const batch = /^ropeserve_batch_lines\{batch_status="(validating|in_progress|finalizing|cancelling)",state="(\w+)"\}/.exec(line);
      if (batch) batchLines[batch[2]] = (batchLines[batch[2]] ?? 0) + value;
    }
    $('m-batch').textContent = values.ropeserve_batch_lines === undefined ? '-'
      : `${batchLines.running ?? 0} running, ${batchLines.pending ?? 0} pending, ${batchLines.completed ?? 0} done, ${batchLines.failed ?? 0} failed`;
    $('m-running').textContent = values.ropeserve_num_requests_running ?? '-';
    $('m-waiting').textContent = values.ropeserve_num_requests_waiting ?? '-';
    const kv = values.ropeserve_kv_cache_usage_perc;
    $('m-kv').textContent = kv === undefined ? '-' : `${(100 * kv).toFixed(1)} %`;
    const tokens = values.ropeserve_generation_tokens_total, now = performance.now();
    if (tokens !== undefined && lastTokens) {
      $('m-tps').textContent = ((tokens - lastTokens.tokens) / ((now - lastTokens.at) / 1000)).toFixed(1);
    }
    if (tokens !== undefined) lastTokens = { tokens, at: now };
  } catch {
    // the server went away; try again later
  }
}

async function modelInfo() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) return setStatus($('model-info'), 'this server needs an API key', true);
    if (!r.ok) return setStatus($('model-info'), await errorOf(r), true);
    const models = (await r.json()).data.map((m) => `${m.id} (${m.task}, ${m.max_model_len} tokens)`);
    setStatus($('model-info'), models.join(' · '));
  } catch (err) {
    setStatus($('model-info'), err.message, true);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  setUpTabs();
  $('sum-go').addEventListener('click', (e) => busy(e.currentTarget, summarize));
  $('qa-add').addEventListener('click', addPassage);
  $('qa-go').addEventListener('click', (e) => busy(e.currentTarget, ask));
  $('chat-send').addEventListener('click', (e) => busy(e.currentTarget, sendChat));
  $('chat-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      $('chat-send').click();
    }
  });
  $('chat-clear').addEventListener('click', () => {
    history = [];
    $('chat-log').textContent = '';
  });
  $('api-key').addEventListener('change', modelInfo);
  modelInfo();
  pollMetrics();
  setInterval(pollMetrics, 2000);
});
