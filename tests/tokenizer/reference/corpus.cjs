// The tokenizer test corpus: deterministic (a seeded xorshift generator, no Math.random), so that
// the C++ test, the reference ids and the benchmarks all see the same strings.
//
//   node corpus.cjs OUT.jsonl [COUNT]    one JSON string per line (default COUNT 20000)
"use strict";
const fs = require("fs");

function rng(seed) {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s;
  };
  return {
    int: (n) => next() % n,
    pick: (a) => a[next() % a.length],
    chance: (p) => next() / 4294967296 < p,
  };
}

const code = [
  `__global__ void saxpy(int n, float a, const float* __restrict__ x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}`,
  `template <int TILE>
__global__ void matmul(const half* A, const half* B, float* C, int M, int N, int K) {
    __shared__ half As[TILE][TILE + 1];
    __shared__ half Bs[TILE][TILE + 1];
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[(blockIdx.y * TILE + threadIdx.y) * K + t * TILE + threadIdx.x];
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += __half2float(As[threadIdx.y][k]) * __half2float(Bs[k][threadIdx.x]);
        __syncthreads();
    }
    C[row * N + col] = acc;
}`,
  `cudaError_t err = cudaMemcpyAsync(d_x, h_x, n * sizeof(float), cudaMemcpyHostToDevice, stream);
if (err != cudaSuccess) { fprintf(stderr, "CUDA error: %s\\n", cudaGetErrorString(err)); return 1; }
saxpy<<<(n + 255) / 256, 256, 0, stream>>>(n, 2.0f, d_x, d_y);`,
  `float v = __shfl_down_sync(0xffffffff, val, offset);
atomicAdd(&out[blockIdx.x], warp_sum);   // one atomic per warp`,
  `#include <torch/extension.h>
torch::Tensor forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  return x.relu_();
}`,
  `def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.max(dim=dim, keepdim=True).values
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 4096, bias=False)`,
  `fn main() -> Result<(), Box<dyn std::error::Error>> {
    let v: Vec<u64> = (0..1_000_000).filter(|x| x % 3 == 0).collect();
    println!("{:?} {}", &v[..4], v.len());
    Ok(())
}`,
  `const f = async ({ a, b = 2, ...rest }) => { await new Promise(r => setTimeout(r, 10)); return a ?? b; };
export default { f, re: /^(?:[a-z]+)\\d{2,}$/giu };`,
  `for f in *.cu; do nvcc -O3 -arch=sm_90 "$f" -o "\${f%.cu}" && ./"\${f%.cu}" | tee -a log.txt; done 2>&1`,
  `SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100.50 GROUP BY u.id HAVING n >= 3;`,
  `{"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "max_tokens": 1024}`,
  `<html><body><div class="x" id='y'>&nbsp;&lt;tag&gt; &amp;&#x1F600;</div></body></html>`,
  `    if (x->next != nullptr && *p++ == '\\0') { return -1; }\n\t\t// TODO(me): fix   this\t\n`,
];

const prose = [
  "The quick brown fox jumps over the lazy dog. It's what they've said; we'll see, I'd think, you're right, I'm sure.",
  "SHE'S HERE AND THEY'VE GONE. Don't, can't, won't, shouldn't've.",
  "Der Größenwahn über Äpfel und Öl: Straße, Maß, Fußgängerübergänge.",
  "L'été à Paris: où est la bibliothèque? Ça coûte 12,50 € — très cher!",
  "¿Dónde está el niño? ¡Mañana será otro día! Pingüino, acción, corazón.",
  "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва — столица России.",
  "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
  "مرحبا بالعالم! كيف حالك اليوم؟ هذا نص باللغة العربية ١٢٣٤٥.",
  "שלום עולם, מה שלומך היום? זה טקסט בעברית.",
  "नमस्ते दुनिया! आप कैसे हैं? यह हिंदी में एक वाक्य है। १२३४",
  "আমি বাংলায় গান গাই। এটি একটি পরীক্ষা।",
  "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
  "你好，世界！这是一个测试句子，包含中文标点符号。机器学习和深度学习。",
  "私は日本語を勉強しています。カタカナとひらがな、そして漢字。東京タワー",
  "안녕하세요 세계! 한국어 문장입니다. 감사합니다.",
  "Tiếng Việt có nhiều dấu: Đường phố Hà Nội rất đông người.",
  "İstanbul'da çok güzel bir gün. Şişli, Ağrı, Iğdır.",
  "ሰላም ለዓለም። ይህ የአማርኛ ጽሑፍ ነው።",
  "გამარჯობა მსოფლიო! ეს ქართული ტექსტია.",
  "Բարեւ աշխարհ։ Սա հայերեն տեքստ է։",
  "வணக்கம் உலகம்! இது ஒரு தமிழ் வாக்கியம்.",
  "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.",
  "Þetta er íslenska: ð, þ, æ, ö. Ålesund og Ærø.",
  "ℌ𝔢𝔩𝔩𝔬 𝕎𝕠𝕣𝕝𝕕 ① ② ③ Ⅻ ½ ¾ ∑ ∫ √ ∞ ≤ ≥ ≠ ± × ÷ → ⇒ ∀ ∃",
  "ﬁ ﬂ Ǆ ǅ ǆ Ω Å K ſ ﬅ",
];

// Decomposed (NFD) forms and combining marks, which the NFC normalizer recomposes.
const combining = ["e\u0301", "a\u0308", "o\u0302\u0323", "n\u0303", "A\u030A", "\u1100\u1161\u11A8", "q\u0307\u0323", "Z\u0335\u0336"];

const emoji = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇩🇪", "🇯🇵", "❤️", "✔︎", "🏳️‍🌈", "🧑🏿‍🚀", "🫠", "🐍", "🚀", "💯", "#️⃣", "🤖"];

const specials = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
  "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>",
  "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<|fim_prefix|>",
  "<|im_", "im_end|>", "<|", "|>", "<0x41>", "<0xE2>", "▁", "▁▁",
];

const spaces = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", "  \n\n  ",
  "\u00a0", "\u3000", "\u2003", "\u2028", "\u000b", "\u000c", " \t \n",
  // U+180E (White_Space until Unicode 6.3; PCRE2 10.42's \s still matches it) and U+200B. Not
  // U+0085 nor U+FEFF: there ECMAScript's \s, which the JS port uses, differs from Oniguruma's,
  // which Hugging Face uses (tokenizer_test.cpp's WhiteSpaceIsOnigurumas checks those).
  "\u180e", "\u200b", " \u180e ", "\u180e\n"];

// Code point ranges to sample single characters from (assigned, non-surrogate, common blocks).
const ranges = [
  [0x21, 0x7e], [0xa1, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x531, 0x556], [0x5d0, 0x5ea], [0x620, 0x64a],
  [0x905, 0x939], [0xe01, 0xe2e], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3],
  [0x2000, 0x206f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x1f300, 0x1f5ff], [0x1f900, 0x1f9ff],
  [0x1d400, 0x1d4ff], [0x20000, 0x2a6df], [0xff01, 0xff5e], [0x0300, 0x036f], [0x1100, 0x11ff],
];

function randomChars(r, n) {
  let s = "";
  for (let i = 0; i < n; ++i) {
    const [lo, hi] = r.pick(ranges);
    s += String.fromCodePoint(lo + r.int(hi - lo + 1));
  }
  return s;
}

function digits(r) {
  const n = 1 + r.int(r.chance(0.2) ? 200 : 24);
  let s = "";
  for (let i = 0; i < n; ++i) s += String.fromCharCode(48 + r.int(10));
  const forms = [s, s + "." + r.int(1000), "-" + s, "0x" + s.slice(0, 12) + "ff", s.replace(/(\d{3})/g, "$1,"),
    "१२३" + s + "٤٥", "3.14159e-" + r.int(40), "v" + r.int(10) + "." + r.int(100) + "." + r.int(1000)];
  return r.pick(forms);
}

function fragment(r) {
  switch (r.int(9)) {
    case 0: case 1: {
      const c = r.pick(code);
      const a = r.int(c.length), b = a + 1 + r.int(c.length - a);
      return r.chance(0.5) ? c : c.slice(a, b);
    }
    case 2: case 3: {
      const p = r.pick(prose);
      const words = p.split(" ");
      const a = r.int(words.length);
      return words.slice(a, a + 1 + r.int(words.length)).join(" ");
    }
    case 4: return r.pick(emoji).repeat(1 + r.int(3));
    case 5: return r.pick(spaces).repeat(1 + r.int(r.chance(0.1) ? 40 : 3));
    case 6: return digits(r);
    case 7: return r.chance(0.5) ? r.pick(specials) : r.pick(combining) + randomChars(r, 1 + r.int(3));
    default: return randomChars(r, 1 + r.int(12));
  }
}

function generate(count) {
  const r = rng(0x1eaf);
  const out = [];
  for (let i = 0; i < count; ++i) {
    const parts = 1 + r.int(r.chance(0.03) ? 40 : 5);
    let s = "";
    for (let j = 0; j < parts; ++j) s += fragment(r) + (r.chance(0.5) ? r.pick([" ", "", "\n", ", "]) : "");
    out.push(s);
  }
  return out;
}

module.exports = { generate };

if (require.main === module) {
  const [out, count] = process.argv.slice(2);
  if (!out) {
    console.error("usage: node corpus.cjs OUT.jsonl [COUNT]");
    process.exit(2);
  }
  const lines = generate(count ? Number(count) : 20000).map((s) => JSON.stringify(s));
  fs.writeFileSync(out, lines.join("\n") + "\n");
}
