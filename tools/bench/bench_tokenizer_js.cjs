// Encoding throughput of @lenml/tokenizers (the JS port of Hugging Face tokenizers) on the corpus
// bench_tokenizer reads, for a side-by-side comparison (see bench_tokenizer.sh).
//
//   node --expose-gc tools/bench/bench_tokenizer_js.cjs --tokenizer DIR --corpus CORPUS.jsonl [--passes N]
"use strict";
const fs = require("fs");
const path = require("path");

const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const dir = arg("--tokenizer");
const corpus = arg("--corpus");
const passes = Number(arg("--passes", "3"));
if (!dir || !corpus) {
  console.error("usage: node --expose-gc bench_tokenizer_js.cjs --tokenizer DIR --corpus CORPUS.jsonl [--passes N]");
  process.exit(2);
}
const root = path.resolve(__dirname, "..", "..");
const { TokenizerLoader } = require(path.join(root, "tests/tokenizer/reference/node_modules/@lenml/tokenizers"));

const texts = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
const gc = global.gc || (() => {});

gc();
const heapBefore = process.memoryUsage().heapUsed;
const t0 = process.hrtime.bigint();
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: fs.existsSync(path.join(dir, "tokenizer_config.json"))
    ? JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")) : {},
});
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
gc();
const heapAfter = process.memoryUsage().heapUsed;

console.log(`tokenizer: ${dir} (@lenml/tokenizers, node ${process.version})`);
console.log(`corpus: ${texts.length} strings, ${(bytes / 1e6).toFixed(2)} MB`);
console.log(`load: ${loadS.toFixed(2)} s; memory held: ${((heapAfter - heapBefore) / 2 ** 20).toFixed(1)} MiB JS heap`);
console.log("pass      seconds         MB/s       tokens/s      cpu s     MB/cpu-s       tokens         fnv1a(ids)");
for (let p = 0; p < passes; ++p) {
  const all = [];
  const start = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();
  for (const t of texts) all.push(tok.encode(t, { add_special_tokens: false }));
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  const used = process.cpuUsage(cpuStart);
  const cpu = (used.user + used.system) / 1e6;
  let hash = 1469598103934665603n;
  let tokens = 0;
  for (const ids of all) {
    tokens += ids.length;
    for (const id of ids) hash = ((hash ^ BigInt(id)) * 1099511628211n) & 0xffffffffffffffffn;
  }
  console.log(`${(p === 0 ? "cold" : "warm").padEnd(6)} ${s.toFixed(3).padStart(10)} ${(bytes / 1e6 / s).toFixed(2).padStart(12)} ` +
    `${(tokens / s).toFixed(0).padStart(14)} ${cpu.toFixed(3).padStart(10)} ${(bytes / 1e6 / cpu).toFixed(2).padStart(12)} ` +
    `${String(tokens).padStart(12)} ${hash.toString(16).padStart(18)}`);
  if (p === passes - 1) {
    // The round trip classes the C++ bench prints. The JS port keeps its normalizer as
    // tok.normalizer (a function object); NFC is what the Qwen files use.
    let exact = 0, normalized = 0, other = 0;
    texts.forEach((t, i) => {
      const back = tok.decode(all[i], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      if (back === t) exact++;
      else if (tok.normalizer && back === tok.normalizer(t)) normalized++;
      else other++;
    });
    console.log(`decode: ${exact} of ${texts.length} strings come back byte for byte, ${normalized} as the ` +
      `file's normalizer wrote them, ${other} otherwise`);
  }
}
