// The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, pinned by the
// lockfile) against a running `deltafin serve`: text and streamed text equal
// the server's own answer to the same request, tool calls (from a server
// whose output side is scripted with a tool call, TOOLS_URL), structured
// output through generateObject (json_schema, constrained decoding) and
// logprobs passed through providerOptions.
// Env: BASE_URL, TOOLS_URL, MODEL_ID, EOM_ID.
import assert from 'node:assert/strict';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, streamText, tool } from 'ai';
import { z } from 'zod';

const { BASE_URL, TOOLS_URL, MODEL_ID } = process.env;
const EOM = Number(process.env.EOM_ID);
const mk = (url) => createOpenAICompatible({ name: 'deltafin', baseURL: url, supportsStructuredOutputs: true });
const model = mk(BASE_URL).chatModel(MODEL_ID);
let n = 0;
const ok = (what) => console.log(`ok ${++n} - ${what}`);

async function raw(body) {
  const r = await fetch(`${BASE_URL}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_ID, ...body }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

// ---- text: the SDK's text and reasoning are the server's content and reasoning_content
const prompt = 'Write a haiku about the sea';
const ref = await raw({ messages: [{ role: 'user', content: prompt }], max_tokens: 40, temperature: 0 });
const g = await generateText({ model, prompt, maxOutputTokens: 40, temperature: 0 });
assert.equal(g.text, ref.choices[0].message.content);
assert.equal(g.reasoningText || '', ref.choices[0].message.reasoning_content);
assert.equal(g.usage.outputTokens, ref.usage.completion_tokens);
ok('generateText equals the server\'s answer (text, reasoning, usage)');

const s = streamText({ model, prompt, maxOutputTokens: 40, temperature: 0 });
assert.equal(await s.text, g.text);
assert.equal((await s.reasoningText) || '', g.reasoningText || '');
ok('streamText equals generateText');

// ---- logprobs through providerOptions, visible in the raw response body
const lp = await generateText({
  model, prompt: 'Say hi', maxOutputTokens: 8, temperature: 0,
  providerOptions: { deltafin: { logprobs: true, top_logprobs: 2 } },
});
const body = lp.response.body;
assert.ok(Array.isArray(body.choices[0].logprobs.content));
for (const e of body.choices[0].logprobs.content) assert.equal(e.top_logprobs[0].logprob, e.logprob);
ok('logprobs pass through providerOptions');

// ---- structured output: generateObject with a zod schema
const Thing = z.object({ name: z.string(), count: z.number().int(), ok: z.boolean() });
const o = await generateObject({ model, schema: Thing, prompt: 'Describe a thing.', maxOutputTokens: 300 });
assert.deepEqual(Thing.parse(o.object), o.object);
ok(`generateObject: ${JSON.stringify(o.object).slice(0, 50)}...`);

// ---- tool calls
const tmodel = mk(TOOLS_URL).chatModel(MODEL_ID);
const tools = {
  get_weather: tool({ description: 'Weather for a city', inputSchema: z.object({ city: z.string() }) }),
};
const t = await generateText({
  model: tmodel, prompt: 'Weather in Oslo?', tools, maxOutputTokens: 300,
  providerOptions: { deltafin: { logit_bias: { [EOM]: -100 } } },
});
assert.equal(t.finishReason, 'tool-calls');
assert.equal(t.toolCalls.length, 1);
assert.equal(t.toolCalls[0].toolName, 'get_weather');
assert.deepEqual(t.toolCalls[0].input, { city: 'Oslo' });
const ts = streamText({
  model: tmodel, prompt: 'Weather in Oslo?', tools, maxOutputTokens: 300,
  providerOptions: { deltafin: { logit_bias: { [EOM]: -100 } } },
});
const calls = await ts.toolCalls;
assert.equal(calls.length, 1);
assert.deepEqual(calls[0].input, { city: 'Oslo' });
assert.equal(await ts.finishReason, 'tool-calls');
ok('tool calls, whole and streamed');
console.log(`# ${n} checks passed`);
