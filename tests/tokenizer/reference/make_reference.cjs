// Writes the tokenizer tests' inputs into node_modules/.leap-reference (npm runs it after `npm ci`,
// see package.json): the corpus (corpus.cjs) and, per family, the ids @lenml/tokenizers gives
// (reference_ids.cjs), computed on all cores. The JS port takes about a minute for all families,
// which is why this runs once at install time and not in every test run.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { execFile } = require("child_process");
const { generate } = require("./corpus.cjs");

const families = ["qwen3", "qwen2_5", "llama3", "deepseek_v3", "llama2", "llama2_metaspace", "gemma3"];
const out = path.join(__dirname, "node_modules", ".leap-reference");

fs.mkdirSync(out, { recursive: true });
const corpus = path.join(out, "corpus.jsonl");
fs.writeFileSync(corpus, generate(20000).map((s) => JSON.stringify(s)).join("\n") + "\n");
// The Metaspace variant's file, for the C++ side to load.
fs.mkdirSync(path.join(out, "llama2_metaspace"), { recursive: true });

const script = path.join(__dirname, "reference_ids.cjs");
const queue = families.slice();
let failed = false;
function next() {
  const family = queue.shift();
  if (!family) return;
  execFile(process.execPath, [script, family, corpus, path.join(out, `${family}.ids`)], { maxBuffer: 1 << 26 }, (err, stdout, stderr) => {
    if (err) {
      failed = true;
      console.error(`reference ids for ${family} failed: ${stderr || err.message}`);
    }
    next();
  });
}
execFile(process.execPath, [script, "llama2_metaspace", corpus, path.join(out, "llama2_metaspace", "tokenizer.json"), "--write-variant"], (err, _o, stderr) => {
  if (err) {
    console.error(`writing the Metaspace variant failed: ${stderr || err.message}`);
    process.exitCode = 1;
    return;
  }
  fs.copyFileSync(path.join(__dirname, "node_modules", "@lenml", "tokenizer-llama2", "models", "tokenizer_config.json"),
    path.join(out, "llama2_metaspace", "tokenizer_config.json"));
  for (let i = 0; i < Math.max(1, Math.min(os.cpus().length, families.length)); ++i) next();
});
process.on("exit", () => {
  if (failed) process.exitCode = 1;
});
