// Golden word ids (Encoding.getWordIds: the pre-tokenizer split of each
// token, null for added specials) from the Hugging Face tokenizers library
// (npm @anush008/tokenizers 0.6.0, tokenizers 0.22), for single texts and
// (question, context) pairs. Run by hand; the output is committed:
//   cd /tmp && npm install @anush008/tokenizers@0.6.0
//   NODE_PATH=/tmp/node_modules node tests/tools/make_words_golden.js tests/data
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const path = require('path');
const data = process.argv[2];
const corpus = JSON.parse(fs.readFileSync(path.join(data, 'golden/tokenizer_corpus.json'), 'utf8')).items.map(i => i.text);
const words = (e) => e.getWordIds().map(x => (x === null || x === undefined) ? -1 : x);
(async () => {
  const dirs = ['tokenizers/synthetic/bert', 'tokenizers/synthetic/unigram', 'tokenizers/synthetic/roberta',
                'tokenizers/llama3', 'tokenizers/qwen3', 'tokenizers/llama2'];
  const texts = corpus.filter(t => t.length > 0).slice(0, 40);
  const cases = [];
  for (const dir of dirs) {
    const tok = Tokenizer.fromFile(path.join(data, dir, 'tokenizer.json'));
    for (let i = 0; i < texts.length; i++) {
      const single = await tok.encode(texts[i], null, { addSpecialTokens: true });
      cases.push({ tokenizer: dir, first: texts[i], words: words(single) });
      if (i % 4 === 0) {
        const second = texts[(i + 7) % texts.length];
        const pair = await tok.encode(texts[i], second, { addSpecialTokens: true });
        cases.push({ tokenizer: dir, first: texts[i], second, words: words(pair) });
      }
    }
  }
  fs.writeFileSync(path.join(data, 'golden', 'encoding_words.json'),
                   JSON.stringify({ meta: { implementation: 'tokenizers 0.22 via @anush008/tokenizers 0.6.0' }, cases }));
  console.log('wrote', cases.length, 'cases');
})();
