// Prints {"ids":[...],"offsets":[...]} per JSON-string line of stdin file, via HF tokenizers.
const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const [,, tokPath, file, special] = process.argv;
const tok = Tokenizer.fromFile(tokPath);
const lines = fs.readFileSync(file, 'utf8').split('\n').filter(l => l.length).map(l => JSON.parse(l));
(async () => {
  const out = [];
  for (let i = 0; i < lines.length; i += 2000) {
    const encs = await tok.encodeBatch(lines.slice(i, i + 2000), { addSpecialTokens: special === '1' });
    for (const e of encs) out.push(JSON.stringify({ids: Array.from(e.getIds()), offsets: e.getOffsets()}));
  }
  process.stdout.write(out.join('\n') + '\n');
})();
