// Single-thread HF tokenizers (Rust, via napi) throughput, line by line in batches.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const [,, tokPath, corpus] = process.argv;
const tok = Tokenizer.fromFile(tokPath);
const text = fs.readFileSync(corpus, 'utf8');
const lines = text.split('\n'); if (lines[lines.length-1] === '') lines.pop();
const bytes = Buffer.byteLength(text, 'utf8');
(async () => {
  let best = 1e9, tokens = 0;
  for (let r = 0; r < 2; r++) {
    tokens = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < lines.length; i += 5000) {
      const encs = await tok.encodeBatch(lines.slice(i, i + 5000), { addSpecialTokens: false });
      for (const e of encs) tokens += e.getIds().length;
    }
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    best = Math.min(best, s);
  }
  console.log(JSON.stringify({impl: 'hf-tokenizers (Rust, napi)', tokenizer: tokPath, mb_per_s: +(bytes/1048576/best).toFixed(2), seconds: +best.toFixed(3), tokens}));
})();
