// Renders chat templates with @huggingface/jinja, the JS port of Jinja that Hugging Face maintains
// for chat templates: the reference the C++ renderer (policy/chat/chat_template.hpp) is compared with.
//
//   node render.mjs CASES.json OUT.json
//
// CASES.json: {"templates": {NAME: SOURCE, ...}, "cases": [{"template": NAME, "context": {...}}]}
// OUT.json:   [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}, ...] in case order.
import { readFileSync, writeFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  console.error("usage: node render.mjs CASES.json OUT.json");
  process.exit(2);
}
const { templates, cases } = JSON.parse(readFileSync(input, "utf8"));
const parsed = {};
for (const [name, source] of Object.entries(templates)) {
  parsed[name] = new Template(source);
}
const results = cases.map(({ template, context }) => {
  try {
    return { ok: true, text: parsed[template].render(context) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
writeFileSync(output, JSON.stringify(results));
console.log(`rendered ${results.length} cases of ${Object.keys(templates).length} templates`);
