// Reference ids from @lenml/tokenizers (the JS port of Hugging Face tokenizers, via transformers.js)
// for the tokenizer files that the @lenml/tokenizer-FAMILY packages ship.
//
//   node reference_ids.cjs FAMILY CORPUS.jsonl OUT.txt [SPECIAL_COUNT]
//
// OUT has one line per corpus string: the ids of encode(text, add_special_tokens=false), space
// separated; then, for the first SPECIAL_COUNT strings (default 200), one more line each with
// add_special_tokens=true. FAMILY "llama2_metaspace" is llama2's file with its Prepend/Replace
// normalizers swapped for the equivalent Metaspace pre-tokenizer (Mistral's and DeepSeek-Coder's
// shape), so that the Metaspace path has a reference too.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

function load_files(family) {
  const base = family === "llama2_metaspace" ? "llama2" : family;
  const dir = path.join(__dirname, "node_modules", "@lenml", `tokenizer-${base}`, "models");
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (family === "llama2_metaspace") metaspace_variant(json);
  return { json, config };
}

function metaspace_variant(json) {
  json.normalizer = null;
  // add_prefix_space is the older spelling of prepend_scheme "always", which the JS port reads.
  const metaspace = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always", split: false };
  json.pre_tokenizer = metaspace;
  json.decoder = { type: "Sequence", decoders: [
    metaspace,
    { type: "ByteFallback" }, { type: "Fuse" }] };
}

function main() {
  const [family, corpus, out, special_count] = process.argv.slice(2);
  if (!family || !corpus || !out) {
    console.error("usage: node reference_ids.cjs FAMILY CORPUS.jsonl OUT.txt [SPECIAL_COUNT]");
    process.exit(2);
  }
  if (process.argv.includes("--write-variant")) {
    const { json } = load_files(family);
    fs.writeFileSync(out, JSON.stringify(json));
    return;
  }
  const { json, config } = load_files(family);
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
  const texts = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const lines = texts.map((t) => tok.encode(t, { add_special_tokens: false }).join(" "));
  const n = Math.min(texts.length, special_count ? Number(special_count) : 200);
  for (let i = 0; i < n; ++i) lines.push(tok.encode(texts[i], { add_special_tokens: true }).join(" "));
  fs.writeFileSync(out, lines.join("\n") + "\n");
}

main();
