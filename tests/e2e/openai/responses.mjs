// The official openai client's Responses API (responses.create and
// responses.stream) against deltafin serve: each reply is checked against
// the same conversation sent through chat completions (greedy decoding, so
// the texts must be equal): text input with instructions, message input, a
// second turn through previous_response_id (which must reuse the kept
// prompt state), a function call forced with tool_choice and its output in
// the next turn, and refusals.
//
// env: BASE_URL, MODEL_ID
import OpenAI from 'openai';

const { BASE_URL, MODEL_ID } = process.env;
const client = new OpenAI({ baseURL: BASE_URL, apiKey: 'none', maxRetries: 0 });
const fail = (msg) => {
  console.error('FAIL: ' + msg);
  process.exit(1);
};
const eq = (a, b, what) => {
  if (JSON.stringify(a) !== JSON.stringify(b)) fail(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
};
const N = 24;
const reasoningOf = (r) =>
  r.output.filter((o) => o.type === 'reasoning').flatMap((o) => o.content.map((c) => c.text)).join('');

async function chat(messages, extra = {}) {
  const c = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: N, ...extra });
  return c;
}

// ---- text input + instructions, whole and streamed
const r1 = await client.responses.create({ model: MODEL_ID, input: 'Tell me about Oslo.', instructions: 'Be brief.', max_output_tokens: N });
if (r1.object !== 'response' || !r1.id.startsWith('resp_')) fail(`not a Response: ${JSON.stringify(r1)}`);
const c1 = await chat([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about Oslo.' }]);
eq(r1.output_text, c1.choices[0].message.content ?? '', 'output_text vs chat content');
eq(reasoningOf(r1), c1.choices[0].message.reasoning_content ?? '', 'reasoning vs chat reasoning_content');
eq([r1.usage.input_tokens, r1.usage.output_tokens, r1.usage.total_tokens],
  [c1.usage.prompt_tokens, c1.usage.completion_tokens, c1.usage.total_tokens], 'usage');
eq(r1.instructions, 'Be brief.', 'instructions echoed');

const st = client.responses.stream({ model: MODEL_ID, input: 'Tell me about Oslo.', instructions: 'Be brief.', max_output_tokens: N });
const types = [];
let deltas = '', lastSeq = -1;
for await (const ev of st) {
  types.push(ev.type);
  if (ev.sequence_number <= lastSeq) fail(`sequence numbers do not increase: ${ev.sequence_number} after ${lastSeq}`);
  lastSeq = ev.sequence_number;
  if (ev.type === 'response.output_text.delta' || ev.type === 'response.reasoning_text.delta') deltas += ev.delta;
}
const f1 = await st.finalResponse();
eq(f1.output_text, r1.output_text, 'streamed output_text vs whole');
eq(reasoningOf(f1), reasoningOf(r1), 'streamed reasoning vs whole');
eq(deltas, reasoningOf(r1) + r1.output_text, 'the deltas add up to the texts');
eq(types[0], 'response.created', 'first event');
if (!['response.completed', 'response.incomplete'].includes(types[types.length - 1])) fail(`last event ${types.at(-1)}`);
eq(f1.usage.output_tokens, r1.usage.output_tokens, 'streamed usage');
console.log('responses ok: text input, instructions, create and stream agree with chat completions');

// ---- message input, then a second turn through previous_response_id
const m1 = await client.responses.create({
  model: MODEL_ID, max_output_tokens: N,
  input: [{ role: 'user', content: [{ type: 'input_text', text: 'Name a colour.' }] }],
});
const m2 = await client.responses.create({ model: MODEL_ID, max_output_tokens: N, input: 'And another?', previous_response_id: m1.id });
const mc1 = await chat([{ role: 'user', content: 'Name a colour.' }]);
eq(m1.output_text, mc1.choices[0].message.content ?? '', 'message input vs chat');
const hist = [
  { role: 'user', content: 'Name a colour.' },
  { role: 'assistant', content: m1.output_text, reasoning_content: reasoningOf(m1) },
  { role: 'user', content: 'And another?' },
];
const mc2 = await chat(hist);
eq(m2.output_text, mc2.choices[0].message.content ?? '', 'previous_response_id turn vs the whole history in chat');
eq(m2.previous_response_id, m1.id, 'previous_response_id echoed');
if (!(m2.usage.input_tokens_details.cached_tokens > 0)) fail(`the second turn reused no kept state: ${JSON.stringify(m2.usage)}`);
console.log('responses ok: message input; previous_response_id continues the conversation from a kept state');

// ---- function tools: a forced call, then its output in the next turn
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'], additionalProperties: false }, strict: true }];
const tk = { chat_template_kwargs: { thinking: false } };
const t1 = await client.responses.create({ model: MODEL_ID, input: 'Weather in Oslo?', tools, tool_choice: 'required', max_output_tokens: 400, ...tk });
const call = t1.output.find((o) => o.type === 'function_call');
if (!call || call.name !== 'get_weather' || !['c', 'f'].includes(JSON.parse(call.arguments).unit))
  fail(`no valid function_call item: ${JSON.stringify(t1.output)}`);
const ts = client.responses.stream({ model: MODEL_ID, input: 'Weather in Oslo?', tools, tool_choice: 'required', max_output_tokens: 400, ...tk });
const fcall = (await ts.finalResponse()).output.find((o) => o.type === 'function_call');
eq([fcall?.name, fcall?.arguments], [call.name, call.arguments], 'streamed function call vs whole');
const t2 = await client.responses.create({
  model: MODEL_ID, previous_response_id: t1.id, tools, max_output_tokens: N, ...tk,
  input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }],
});
const tc = await chat([
  { role: 'user', content: 'Weather in Oslo?' },
  { role: 'assistant', content: '', tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
  { role: 'tool', tool_call_id: call.call_id, content: 'sunny, 21 C' },
], { tools: tools.map(({ type, name, description, parameters }) => ({ type, function: { name, description, parameters } })), ...tk });
eq(t2.output_text, tc.choices[0].message.content ?? '', 'the turn after a function output vs chat');
console.log('responses ok: a forced function call (whole and streamed), its output in the next turn');

// ---- refusals
for (const [body, param] of [
  [{ input: 'x', previous_response_id: 'resp_nope' }, 'previous_response_id'],
  [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
  [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] }, 'input[0].content[0].type'],
  [{ input: 'x', frobnicate: 1 }, 'frobnicate'],
]) {
  try {
    await client.responses.create({ model: MODEL_ID, ...body });
    fail(`accepted: ${JSON.stringify(body)}`);
  } catch (e) {
    if (e.status !== 400 || e.param !== param) fail(`${JSON.stringify(body)}: ${e.status} ${e.param} ${e.message}`);
  }
}
console.log('responses ok: refusals name the field');
