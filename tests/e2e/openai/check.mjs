// The official openai client (pinned in package.json) against a running
// `deltafin serve`: models, chat and text completions with and without
// streaming, each compared with `deltafin run --json` on the same prompt.
// Env: BASE_URL, MODEL_ID, DF_BIN, MODEL_DIR, API_KEY (optional).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const { BASE_URL, MODEL_ID, DF_BIN, MODEL_DIR } = process.env;
for (const k of ['BASE_URL', 'MODEL_ID', 'DF_BIN', 'MODEL_DIR']) {
  if (!process.env[k]) throw new Error(`${k} is not set`);
}
const client = new OpenAI({
  baseURL: BASE_URL,
  apiKey: process.env.API_KEY || 'none',
  maxRetries: 0,
  timeout: 120_000,
});

const cfg = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'config.json'), 'utf8'));
const eosId = (cfg.text_config || cfg).eos_token_id;
assert.equal(typeof eosId, 'number');

// deltafin run on the same prompt: the reference.
function run(args) {
  const out = execFileSync(DF_BIN, ['run', '--model', MODEL_DIR, '--json', ...args], {
    encoding: 'utf8',
    timeout: 120_000,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return JSON.parse(out);
}

// A plain completion stops at the end-of-text id, whose name is not text:
// run is given the same stop id; if it stopped there, the id adds nothing.
function runText(prompt, n, extra = []) {
  const r = run(['--prompt', prompt, '--max-new', String(n), '--stop', String(eosId), ...extra]);
  const last = r.output_ids[r.output_ids.length - 1];
  if (r.finish_reason === 'stop') {
    assert.equal(last, eosId);
    const tc = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'tokenizer_config.json'), 'utf8'));
    const name = tc.added_tokens_decoder[String(eosId)].content;
    assert.ok(r.text.endsWith(name), 'run printed the stop id by its name');
    r.text = r.text.slice(0, r.text.length - name.length);
  }
  return r;
}

let checks = 0;
function ok(what) {
  checks++;
  console.log(`ok ${checks} - ${what}`);
}

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const s = { role: null, content: '', reasoning: '', finish: null, usage: null, chunks: 0, ids: new Set() };
  for await (const chunk of stream) {
    s.ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL_ID);
    if (chunk.usage) {
      assert.equal(chunk.choices.length, 0);
      s.usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.choices.length, 1);
    const c = chunk.choices[0];
    if (s.chunks === 0) assert.equal(c.delta.role, 'assistant', 'the stream opens with the role');
    else assert.equal(c.delta.role, undefined);
    s.chunks++;
    assert.equal(s.finish, null, 'nothing after the finish frame but usage');
    if (c.delta.reasoning_content) {
      assert.equal(s.content, '', 'reasoning comes before content');
      s.reasoning += c.delta.reasoning_content;
    }
    if (c.delta.content) s.content += c.delta.content;
    if (c.finish_reason) s.finish = c.finish_reason;
  }
  assert.equal(s.ids.size, 1, 'one id for the whole stream');
  return s;
}

async function streamText(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  const s = { text: '', finish: null, usage: null, ids: new Set() };
  for await (const chunk of stream) {
    s.ids.add(chunk.id);
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) {
      s.usage = chunk.usage;
      continue;
    }
    assert.equal(s.finish, null);
    s.text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) s.finish = chunk.choices[0].finish_reason;
  }
  assert.equal(s.ids.size, 1);
  return s;
}

// ---- models
{
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, [MODEL_ID]);
  assert.equal(list.data[0].object, 'model');
  const m = await client.models.retrieve(MODEL_ID);
  assert.equal(m.id, MODEL_ID);
  ok('models.list and models.retrieve');
}

// ---- chat: non-streaming and streaming equal deltafin run --chat
const chatPrompts = [
  ['Write a haiku about the sea.', 48, 'max'],
  ['Hello there', 300, 'max'],
  ['Explain \u00e9t\u00e9 \u65e5\u672c \ud83d\ude00 in one line.', 40, 'low'],
];
for (const [prompt, n, effort] of chatPrompts) {
  const ref = run(['--chat', '--prompt', prompt, '--max-new', String(n), '--effort', effort]);
  const params = {
    model: MODEL_ID,
    messages: [{ role: 'user', content: prompt }],
    max_tokens: n,
    reasoning_effort: effort,
  };
  const r = await client.chat.completions.create(params);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL_ID);
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  const msg = r.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.reasoning_content, ref.reasoning);
  assert.equal(msg.content, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.finish_reason);
  assert.equal(r.usage.prompt_tokens, ref.prompt_ids.length);
  assert.equal(r.usage.completion_tokens, ref.output_ids.length);
  assert.equal(r.usage.total_tokens, ref.prompt_ids.length + ref.output_ids.length);
  ok(`chat "${prompt.slice(0, 20)}" (${n}, ${effort}) equals run --chat: ` +
     `${ref.output_ids.length} ids, finish ${ref.finish_reason}`);

  const s = await streamChat({ ...params, stream_options: { include_usage: true } });
  assert.equal(s.reasoning, ref.reasoning);
  assert.equal(s.content, ref.text);
  assert.equal(s.finish, ref.finish_reason);
  assert.ok(s.usage, 'include_usage adds a usage chunk');
  assert.equal(s.usage.prompt_tokens, ref.prompt_ids.length);
  assert.equal(s.usage.completion_tokens, ref.output_ids.length);
  ok(`chat stream "${prompt.slice(0, 20)}" equals run --chat (${s.chunks} chunks)`);
}

// a multi-turn conversation with system, assistant (with reasoning) and tool turns
{
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: [{ type: 'text', text: 'What is ' }, { type: 'text', text: '2+2?' }] },
    { role: 'assistant', content: '4', reasoning_content: 'simple sum' },
    { role: 'tool', content: '{"answer":4}', tool_call_id: 'call_1' },
    { role: 'user', content: 'And 3+3?' },
  ];
  const a = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 16 });
  const b = await streamChat({ model: MODEL_ID, messages, max_tokens: 16 });
  assert.equal(b.reasoning, a.choices[0].message.reasoning_content);
  assert.equal(b.content, a.choices[0].message.content);
  assert.equal(b.finish, a.choices[0].finish_reason);
  assert.equal(b.usage, null, 'no usage chunk unless asked');
  ok('multi-turn chat: stream equals non-stream');
}

// ---- text completions equal deltafin run --prompt
const textPrompts = [
  ['The capital of France is', 40],
  ['Once upon a time', 120],
];
for (const [prompt, n] of textPrompts) {
  const ref = runText(prompt, n);
  const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: n });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.finish_reason);
  assert.equal(r.usage.prompt_tokens, ref.prompt_ids.length);
  assert.equal(r.usage.completion_tokens, ref.output_ids.length);
  ok(`completion "${prompt}" (${n}) equals run --prompt: finish ${ref.finish_reason}`);

  const s = await streamText({ model: MODEL_ID, prompt, max_tokens: n, stream_options: { include_usage: true } });
  assert.equal(s.text, ref.text);
  assert.equal(s.finish, ref.finish_reason);
  assert.equal(s.usage.completion_tokens, ref.output_ids.length);
  ok(`completion stream "${prompt}" equals run --prompt`);

  // the prompt as token ids gives the same continuation
  const t = await client.completions.create({ model: MODEL_ID, prompt: ref.prompt_ids, max_tokens: n });
  assert.equal(t.choices[0].text, ref.text);
  ok(`completion from prompt ids equals run --prompt`);
}

// ---- stop sequences: the text ends where the stop text begins, both ways
{
  const prompt = 'Once upon a time';
  const ref = runText(prompt, 120);
  // a stop string taken from the middle of the reference text
  const cp = Array.from(ref.text);
  assert.ok(cp.length > 12, 'the reference text is long enough');
  const stop = cp.slice(Math.floor(cp.length / 2), Math.floor(cp.length / 2) + 3).join('');
  const want = ref.text.slice(0, ref.text.indexOf(stop));
  const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 120, stop: [stop, 'never appears \u2603\u2603'] });
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens < ref.output_ids.length);
  const s = await streamText({ model: MODEL_ID, prompt, max_tokens: 120, stop });
  assert.equal(s.text, want);
  assert.equal(s.finish, 'stop');
  ok(`stop ${JSON.stringify(stop)}: text cut before it, finish stop, stream equal`);

  // chat: the stop applies to the reasoning text too
  const cref = run(['--chat', '--prompt', 'Hello there', '--max-new', '300']);
  const rc = Array.from(cref.reasoning);
  assert.ok(rc.length > 12);
  const cstop = rc.slice(10, 13).join('');
  const cwant = cref.reasoning.slice(0, cref.reasoning.indexOf(cstop));
  const params = { model: MODEL_ID, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 300, stop: cstop };
  const c = await client.chat.completions.create(params);
  assert.equal(c.choices[0].message.reasoning_content, cwant);
  assert.equal(c.choices[0].finish_reason, 'stop');
  const cs = await streamChat(params);
  assert.equal(cs.reasoning, cwant);
  assert.equal(cs.finish, 'stop');
  ok(`chat stop ${JSON.stringify(cstop)}: reasoning cut before it, stream equal`);
}

// ---- seeded sampling is real sampling: equal to run with the same seed
{
  const prompt = 'The capital of France is';
  const greedy = runText(prompt, 40);
  const ref = runText(prompt, 40, ['--temperature', '1.3', '--top-p', '0.95', '--seed', '1234']);
  const params = { model: MODEL_ID, prompt, max_tokens: 40, temperature: 1.3, top_p: 0.95, seed: 1234 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.equal(a.choices[0].text, ref.text);
  assert.equal(b.choices[0].text, ref.text);
  assert.notEqual(ref.text, greedy.text, 'sampling at temperature 1.3 departs from greedy');
  ok('seeded sampling equals run --temperature --top-p --seed');
}

// ---- n > 1 runs the choices one after another: choice 0 is the seeded run,
// the others draw with derived seeds; greedy choices are all the same
{
  const prompt = 'The capital of France is';
  const ref = runText(prompt, 40, ['--temperature', '1.3', '--top-p', '0.95', '--seed', '1234']);
  const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 40, temperature: 1.3, top_p: 0.95, seed: 1234, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.choices[0].text, ref.text);
  assert.ok(r.choices[1].text !== ref.text || r.choices[2].text !== ref.text, 'the other choices draw anew');
  const greedy = runText(prompt, 12);
  const g = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 12, n: 2 });
  assert.equal(g.choices[0].text, greedy.text);
  assert.equal(g.choices[1].text, greedy.text);
  assert.equal(g.usage.completion_tokens, 2 * greedy.output_ids.length);
  // top_k 1 leaves only the best token: sampling at any temperature is greedy
  const k1 = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 12, temperature: 1.5, seed: 9, top_k: 1 });
  assert.equal(k1.choices[0].text, greedy.text);
  ok('n > 1 (seeded choice 0 equals run), greedy choices equal, top_k 1 is greedy');
}

// ---- logprobs: the chosen token is the best alternative when greedy; the
// tokens spell the text
{
  const prompt = 'Once upon a time';
  const greedy = runText(prompt, 10);
  const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 10, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(r.choices[0].text, greedy.text);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    // keyed by text: two tokens that print alike (a lone byte shown as U+FFFD) share a key
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    const best = top.reduce((a, b) => (b[1] > a[1] ? b : a));
    assert.ok(best[1] >= lp.token_logprobs[i] - 1e-9);
    if (top.length === 3) {
      assert.equal(best[0], lp.tokens[i], 'greedy picks the most likely token');
      assert.ok(Math.abs(best[1] - lp.token_logprobs[i]) < 1e-9);
    }
    assert.ok(top.reduce((a, t) => a + Math.exp(t[1]), 0) <= 1 + 1e-9);
  }
  if (lp.tokens.length > 1) assert.equal(lp.text_offset[1], lp.text_offset[0] + lp.tokens[0].length);
  const c = await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, logprobs: true, top_logprobs: 2 });
  assert.ok(Array.isArray(c.choices[0].logprobs.content));
  for (const e of c.choices[0].logprobs.content) {
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.ok(Array.isArray(e.bytes) && e.bytes.length >= 1);
  }
  // streamed logprobs cover the same tokens as the whole response
  const st = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 10, logprobs: 3, stream: true });
  const toks = [];
  let text = '';
  for await (const ch of st) {
    text += ch.choices[0].text;
    if (ch.choices[0].logprobs) toks.push(...ch.choices[0].logprobs.tokens);
  }
  assert.equal(text, r.choices[0].text);
  assert.deepEqual(toks, lp.tokens);
  ok('logprobs (completions, chat, streamed): greedy ids are the top alternative, tokens spell the text');
}

// ---- what the SDK round-trips and other clients send is accepted
{
  const r = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [
      { role: 'system', content: 'be brief', name: 'boss' },
      { role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }], name: 'ann' },
      { role: 'assistant', content: 'hello', parsed: null, annotations: [], refusal: null },
      { role: 'user', content: 'again' },
    ],
    max_tokens: 4,
    stop: ['1', '2', '3', '4', '5', '6'],
    reasoning_effort: 'minimal',
    top_k: 40,
    min_p: 0.05,
    repeat_penalty: 1.1,
    presence_penalty: 0.5,
    frequency_penalty: 0.2,
    temperature: 0.7,
    seed: 5,
  });
  assert.equal(r.choices.length, 1);
  ok('name, parsed, annotations, cache_control, 6 stops, reasoning_effort minimal, llama.cpp sampling fields');
}

// ---- structured output: constrained decoding keeps the reply inside the
// schema, so the SDK's .parse helper (zod) accepts it; json_object gives one
// JSON object; greedy output is the same whole and streamed
{
  const Person = z.object({
    name: z.string(),
    age: z.number().int(),
    member: z.boolean(),
    tags: z.array(z.enum(['red', 'green'])),
    score: z.number().nullable(), // zod writes OpenAPI's "nullable": true for it
  });
  const params = {
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
    response_format: zodResponseFormat(Person, 'person'),
    max_tokens: 400,
  };
  const r = await client.chat.completions.parse(params);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.deepEqual(Person.parse(m.parsed), m.parsed);
  assert.deepEqual(JSON.parse(m.content), m.parsed);
  const st = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  for await (const ch of st) if (ch.choices[0]) text += ch.choices[0].delta.content || '';
  assert.equal(text, m.content);
  const o = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Any JSON object.' }],
    response_format: { type: 'json_object' },
    max_tokens: 400,
    temperature: 0.8,
    seed: 11,
  });
  const v = JSON.parse(o.choices[0].message.content);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
  ok(`structured output: .parse(zod) -> ${JSON.stringify(m.parsed).slice(0, 60)}..., json_object`);
}

// ---- errors surface as the client's typed errors with the server's param
{
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], n: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n',
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'model' && e.code === 'model_not_found',
  );
  await assert.rejects(
    client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 1_000_000 }),
    (e) => e.status === 400 && e.param === 'max_tokens' && e.code === 'context_length_exceeded' &&
      e.message.includes(String((cfg.text_config || cfg).max_position_embeddings)),
  );
  ok('errors reach the client as BadRequestError with param and code');
}

console.log(`# ${checks} checks passed`);
