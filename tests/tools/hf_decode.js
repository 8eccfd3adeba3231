const { Tokenizer } = require('@anush008/tokenizers');
const fs = require('fs');
const [,, tokPath, file, skip] = process.argv;
const tok = Tokenizer.fromFile(tokPath);
const lines = fs.readFileSync(file, 'utf8').split('\n').filter(l => l.length).map(l => JSON.parse(l).ids);
(async () => {
  const out = [];
  for (const ids of lines) out.push(JSON.stringify({text: await tok.decode(ids, skip === '1')}));
  process.stdout.write(out.join('\n') + '\n');
})();
