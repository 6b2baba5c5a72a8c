// Encodes a corpus with an independent tokenizer, for Cedar's BPE parity test
// (tests/bridge_bpe_parity_test.cpp):
//   node encode.mjs TOKENIZER_DIR CORPUS OUT [hf-js|hf-rust]
// hf-js (the default) is @huggingface/tokenizers (pure JavaScript); hf-rust is `tokenizers`,
// Hugging Face's Node binding of the Rust crate (prebuilt native binaries inside the package),
// i.e. the tokenizer the released model was made with.
// TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json. CORPUS is a list of texts,
// each a little-endian uint32 byte length then the bytes (any bytes: invalid UTF-8 is decoded
// by TextDecoder, which replaces each ill-formed subpart with U+FFFD as Cedar does).
// OUT gets a JSON array with one array of ids per text (encode without added BOS/EOS).
// Exits 3 when the chosen implementation's package is not installed.
import { readFileSync, writeFileSync } from "node:fs";

const [dir, corpusPath, outPath, impl = "hf-js"] = process.argv.slice(2);
if (!outPath || !["hf-js", "hf-rust"].includes(impl)) {
  console.error("usage: node encode.mjs TOKENIZER_DIR CORPUS OUT [hf-js|hf-rust]");
  process.exit(2);
}

// encodeOne(text) -> Promise<ids>, without added BOS/EOS.
async function load() {
  if (impl === "hf-js") {
    const { Tokenizer } = await import("@huggingface/tokenizers");
    const tokenizer = new Tokenizer(
      JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
      JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
    );
    return async (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;
  }
  let native;
  try {
    native = (await import("tokenizers")).default;
  } catch (e) {
    console.error(`the npm package "tokenizers" (the Rust tokenizer) is not installed: ${e.message}`);
    process.exit(3);
  }
  const tokenizer = native.Tokenizer.fromFile(`${dir}/tokenizer.json`);
  return async (text) => (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
}

const encodeOne = await load();
const corpus = readFileSync(corpusPath);
// ignoreBOM: a leading U+FEFF is text like any other (TextDecoder would drop it).
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const out = [];
for (let pos = 0; pos < corpus.length; ) {
  const n = corpus.readUInt32LE(pos);
  const text = decoder.decode(corpus.subarray(pos + 4, pos + 4 + n));
  pos += 4 + n;
  out.push(await encodeOne(text));
}
writeFileSync(outPath, JSON.stringify(out));
