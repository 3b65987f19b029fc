// The official openai client in a real browser (headless Debian Chromium via
// playwright-core) against `deltafin serve --cors ORIGIN`: a page served from
// ORIGIN lists models, makes a chat completion and streams one. The SDK
// sends its own x-stainless-* headers, so every call needs a preflight that
// allows them. The texts must equal what the same requests give without a
// browser (Node's fetch: no CORS), and a page from an origin the server does
// not allow must fail its preflight.
//
// env: BASE_URL (…/v1), MODEL_ID, API_KEY
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = path.join(here, 'node_modules', 'openai');
const { BASE_URL, MODEL_ID, API_KEY, PAGE_PORT } = process.env;

const page = `<!doctype html><meta charset="utf-8"><title>deltafin browser check</title>
<script type="module">
import OpenAI from '/openai/index.mjs';
window.runChecks = async (baseURL, model, apiKey, messages) => {
  const client = new OpenAI({ baseURL, apiKey, dangerouslyAllowBrowser: true, maxRetries: 0 });
  const out = {};
  try {
    const models = await client.models.list();
    out.models = models.data.map((m) => m.id);
    const c = await client.chat.completions.create({ model, messages, max_tokens: 12 });
    out.whole = c.choices[0].message;
    const s = await client.chat.completions.create({ model, messages, max_tokens: 12, stream: true });
    let content = '', reasoning = '';
    for await (const ch of s) {
      const d = ch.choices[0]?.delta ?? {};
      content += d.content ?? '';
      reasoning += d.reasoning_content ?? '';
    }
    out.streamed = { content, reasoning_content: reasoning };
  } catch (e) {
    out.error = String(e && e.message ? e.message : e);
  }
  return out;
};
window.ready = true;
</script>`;

// the page and the SDK's ES modules, from a tiny static server (the page's origin)
const types = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.map': 'application/json' };
const server = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/') {
    res.writeHead(200, { 'content-type': 'text/html' });
    return res.end(page);
  }
  if (u.pathname.startsWith('/openai/')) {
    const f = path.normalize(path.join(sdk, u.pathname.slice('/openai/'.length)));
    if (f.startsWith(sdk + path.sep) && fs.existsSync(f) && fs.statSync(f).isFile()) {
      res.writeHead(200, { 'content-type': types[path.extname(f)] ?? 'application/octet-stream' });
      return res.end(fs.readFileSync(f));
    }
  }
  res.writeHead(404);
  res.end();
});
await new Promise((r) => server.listen(Number(PAGE_PORT), '127.0.0.1', r));

const fail = (msg) => {
  console.error('FAIL: ' + msg);
  process.exitCode = 1;
};
const messages = [{ role: 'user', content: 'Say something short.' }];

// the reference: the same requests from Node, where there is no CORS
async function reference() {
  const h = { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` };
  const r = await fetch(`${BASE_URL}/chat/completions`, {
    method: 'POST',
    headers: h,
    body: JSON.stringify({ model: MODEL_ID, messages, max_tokens: 12 }),
  });
  if (r.status !== 200) throw new Error(`reference request: ${r.status} ${await r.text()}`);
  return (await r.json()).choices[0].message;
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'df-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
try {
  const ref = await reference();
  const run = async (origin) => {
    const p = await ctx.newPage();
    await p.goto(`${origin}/`);
    await p.waitForFunction(() => window.ready === true, null, { timeout: 60000 });
    const r = await p.evaluate(([b, m, k, msgs]) => window.runChecks(b, m, k, msgs),
      [BASE_URL, MODEL_ID, API_KEY, messages]);
    await p.close();
    return r;
  };
  // the allowed origin (the server was started with --cors http://127.0.0.1:PAGE_PORT)
  const ok = await run(`http://127.0.0.1:${PAGE_PORT}`);
  if (ok.error) fail(`from the allowed origin: ${ok.error}`);
  else {
    if (JSON.stringify(ok.models) !== JSON.stringify([MODEL_ID])) fail(`models ${JSON.stringify(ok.models)}`);
    if (ok.whole.content !== ref.content || (ok.whole.reasoning_content ?? '') !== (ref.reasoning_content ?? ''))
      fail(`the browser's reply ${JSON.stringify(ok.whole)} differs from Node's ${JSON.stringify(ref)}`);
    if (ok.streamed.content !== ref.content || ok.streamed.reasoning_content !== (ref.reasoning_content ?? ''))
      fail(`the browser's stream ${JSON.stringify(ok.streamed)} differs from Node's ${JSON.stringify(ref)}`);
    if (!((ref.content ?? '') + (ref.reasoning_content ?? '')).length) fail('the reference reply is empty');
  }
  // another origin (localhost is not 127.0.0.1 to a browser): the preflight is refused
  const other = await run(`http://localhost:${PAGE_PORT}`);
  if (!other.error) fail(`an origin the server does not allow got a reply: ${JSON.stringify(other)}`);
  else if (!/connection error/i.test(other.error)) fail(`unexpected error from another origin: ${other.error}`);
  if (!process.exitCode) console.log('browser ok: the SDK from the allowed origin, refused from another');
} finally {
  await ctx.close();
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
