// Encodes a corpus with the independent JavaScript tokenizer (@huggingface/tokenizers), for
// Cedar's BPE parity test (tests/bridge_bpe_parity_test.cpp).
//   node encode.mjs TOKENIZER_DIR CORPUS OUT
// TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json. CORPUS is a list of texts,
// each a little-endian uint32 byte length then the bytes (any bytes: invalid UTF-8 is decoded
// by TextDecoder, which replaces each ill-formed subpart with U+FFFD as Cedar does).
// OUT gets a JSON array with one array of ids per text (encode without added BOS/EOS).
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node encode.mjs TOKENIZER_DIR CORPUS OUT");
  process.exit(2);
}
const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
  JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
);
const corpus = readFileSync(corpusPath);
// ignoreBOM: a leading U+FEFF is text like any other (TextDecoder would drop it).
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const out = [];
for (let pos = 0; pos < corpus.length; ) {
  const n = corpus.readUInt32LE(pos);
  const text = decoder.decode(corpus.subarray(pos + 4, pos + 4 + n));
  pos += 4 + n;
  out.push(tokenizer.encode(text, { add_special_tokens: false }).ids);
}
writeFileSync(outPath, JSON.stringify(out));
