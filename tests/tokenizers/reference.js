// The reference for kiln's tokenizers: Hugging Face tokenizers (its Rust library, through the npm
// package `tokenizers`, which ships it prebuilt) on a tokenizer.json. tests/tokenizers/run.sh
// compares kiln with what this prints. Plain ids: encode with addSpecialTokens false, so the
// post_processor's template (Llama's BOS "<s>") is left out, as kiln's encode leaves it out; the
// template's tokens are printed apart (bos, eos: what it puts before and after a text). Decode
// keeps special tokens (skipSpecialTokens false), as kiln's decode does.
//
// Usage (MODULES: the node_modules directory that holds `tokenizers`):
//   node reference.js MODULES expect TOKENIZER_JSON CORPUS_JSON   > expected.json
//       {"bos": ID|null, "eos": ID|null, "texts": [{"text", "ids", "decoded"}, ...]}
//   node reference.js MODULES encode TOKENIZER_JSON TEXT          ids, space-separated
//   node reference.js MODULES decode TOKENIZER_JSON ID...         the text
//   node reference.js MODULES metaspace IN_JSON OUT_JSON SCHEME SPLIT
//       IN with its normalizer Prepend + Replace made the pre_tokenizer Metaspace (newer files'
//       form; SCHEME first|always|never, SPLIT true|false)
//   node reference.js MODULES template IN_JSON OUT_JSON BOS
//       IN with the post_processor Meta's Llama 3 files have: Sequence[ByteLevel,
//       TemplateProcessing("BOS $A")] (@lenml's copy has the ByteLevel alone)
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, command, ...args] = process.argv.slice(2);
const { Tokenizer } = require(path.join(modules, 'tokenizers'));

async function plainIds(tok, text) {
  return (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
}

// What the template adds around a text: the ids before and after its plain ids.
async function template(tok) {
  const plain = await plainIds(tok, 'x');
  const full = (await tok.encode('x', null, { addSpecialTokens: true })).getIds();
  const at = full.findIndex((_, k) => plain.every((id, j) => full[k + j] === id));
  if (at < 0 || full.length - at - plain.length > 1 || at > 1)
    throw new Error(`unexpected template: ${full} around ${plain}`);
  return { bos: at ? full[0] : null, eos: full.length > at + plain.length ? full.at(-1) : null };
}

async function main() {
  if (command === 'expect') {
    const tok = Tokenizer.fromFile(args[0]);
    const corpus = JSON.parse(fs.readFileSync(args[1], 'utf8'));
    const texts = [];
    for (const { text } of corpus.texts) {
      const ids = await plainIds(tok, text);
      texts.push({ text, ids, decoded: await tok.decode(ids, false) });
    }
    process.stdout.write(JSON.stringify({ ...(await template(tok)), texts }, null, 1) + '\n');
  } else if (command === 'encode') {
    const tok = Tokenizer.fromFile(args[0]);
    console.log((await plainIds(tok, args[1])).join(' '));
  } else if (command === 'decode') {
    const tok = Tokenizer.fromFile(args[0]);
    console.log(await tok.decode(args.slice(1).map(Number), false));
  } else if (command === 'metaspace') {
    const [from, to, scheme, split] = args;
    const j = JSON.parse(fs.readFileSync(from, 'utf8'));
    j.normalizer = null;
    j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme,
                        split: split === 'true' };
    fs.writeFileSync(to, JSON.stringify(j));
  } else if (command === 'template') {
    const [from, to, bos] = args;
    const j = JSON.parse(fs.readFileSync(from, 'utf8'));
    const id = j.added_tokens.find((a) => a.content === bos).id;
    const special = (type) => ({ SpecialToken: { id: bos, type_id: type } });
    j.post_processor = {
      type: 'Sequence',
      processors: [
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: 'TemplateProcessing',
          single: [special(0), { Sequence: { id: 'A', type_id: 0 } }],
          pair: [special(0), { Sequence: { id: 'A', type_id: 0 } }, special(1),
                 { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: { [bos]: { id: bos, ids: [id], tokens: [bos] } },
        },
      ],
    };
    fs.writeFileSync(to, JSON.stringify(j));
  } else {
    throw new Error(`unknown command ${command}`);
  }
}

main().catch((e) => {
  console.error(`reference.js: ${e.stack || e}`);
  process.exit(1);
});
