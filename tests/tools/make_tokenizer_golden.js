// Golden outputs of the Hugging Face tokenizers library (Rust, through the
// npm binding @anush008/tokenizers 0.6.0, which wraps tokenizers 0.22) for
// the synthetic tokenizers in tests/data/tokenizers/synthetic and for
// question/context pairs with truncation, stride and overflow on every
// tokenizer in tests/data. Run by hand; the output is committed:
//
//   cd /tmp && npm install @anush008/tokenizers@0.6.0
//   NODE_PATH=/tmp/node_modules node tests/tools/make_tokenizer_golden.js tests/data
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const path = require('path');
const data = process.argv[2];
const corpus = JSON.parse(fs.readFileSync(path.join(data, 'golden/tokenizer_corpus.json'), 'utf8')).items.map(i => i.text);

function enc(e) {
  return {
    ids: Array.from(e.getIds()), type_ids: Array.from(e.getTypeIds()), offsets: e.getOffsets(),
    special_tokens_mask: Array.from(e.getSpecialTokensMask()),
    sequence_ids: e.getSequenceIds().map(x => (x === null || x === undefined) ? -1 : x),
    overflowing: e.getOverflowing().map(enc),
  };
}

(async () => {
  const synthetic = ['bert', 'bert_processing', 'unigram', 'roberta', 'wordlevel'];
  for (const name of synthetic) {
    const tok = Tokenizer.fromFile(path.join(data, 'tokenizers/synthetic', name, 'tokenizer.json'));
    const items = [];
    const texts = corpus.concat(['Hello ropeserve world', 'x ropeserves <mask> here', '  <mask>   spaced <mask>',
                                 'Ünïcödé ÀÉÎÕÜ ﬁne ½ ①', '中文字符和English混合', 'a\u00a0b\u2003c\u200bd']);
    for (const text of texts) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const withSp = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(withSp.getIds());
      items.push({ text, plain: enc(plain), with_special: enc(withSp),
                   decode: await tok.decode(ids, false), decode_skip: await tok.decode(ids, true) });
    }
    fs.writeFileSync(path.join(data, 'golden', `synthetic_${name}.json`),
                     JSON.stringify({ meta: { implementation: 'tokenizers 0.22 via @anush008/tokenizers 0.6.0', tokenizer: `tokenizers/synthetic/${name}` }, items }));
    console.log('wrote synthetic', name, items.length);
  }
  // Pairs: a question and a context, with truncation settings as QA uses them.
  const questions = corpus.filter(t => t.length > 0 && t.length < 80).slice(0, 12);
  const contexts = corpus.filter(t => t.length > 150).slice(0, 10);
  const settings = [
    { maxLength: 48, stride: 16, strategy: 'OnlySecond' },
    { maxLength: 40, stride: 0, strategy: 'OnlySecond' },
    { maxLength: 32, stride: 8, strategy: 'LongestFirst' },
    { maxLength: 30, stride: 5, strategy: 'OnlyFirst' },
    { maxLength: 64, stride: 20, strategy: 'OnlySecond', direction: 'Left' },
  ];
  const all = ['bert', 'bert_processing', 'unigram', 'roberta'].map(n => [n, `tokenizers/synthetic/${n}`])
    .concat([['qwen3', 'tokenizers/qwen3'], ['llama2', 'tokenizers/llama2'], ['llama3', 'tokenizers/llama3']]);
  const cases = [];
  for (const [name, dir] of all) {
    for (const s of settings) {
      const tok = Tokenizer.fromFile(path.join(data, dir, 'tokenizer.json'));
      tok.setTruncation(s.maxLength, { stride: s.stride, strategy: s.strategy, direction: (s.direction || 'Right').toLowerCase() });
      for (let k = 0; k < 6; k++) {
        const q = questions[(k * 5 + cases.length) % questions.length], c = contexts[(k * 3 + cases.length) % contexts.length];
        const rec = { tokenizer: dir, truncation: { max_length: s.maxLength, stride: s.stride, strategy: s.strategy, direction: s.direction || 'Right' }, question: q, context: c };
        try { rec.encoding = enc(await tok.encode(q, c, { addSpecialTokens: true })); }
        catch (e) { rec.error = String(e.message || e); }
        cases.push(rec);
      }
    }
  }
  fs.writeFileSync(path.join(data, 'golden', 'encode_pair.json'),
                   JSON.stringify({ meta: { implementation: 'tokenizers 0.22 via @anush008/tokenizers 0.6.0' }, cases }));
  console.log('wrote pairs', cases.length, 'errors', cases.filter(c => c.error).length);
})();
