// Tool calling through the official openai client against a `deltafin serve`
// whose output side is fed a tool call as the release's chat format writes
// it (--debug-output-ids, taken from /apply-template of a history holding
// that call): the client sees tool_calls with the same name and arguments,
// finish_reason tool_calls, in whole and streamed responses, and the result
// goes back in the history.
// Env: BASE_URL, MODEL_ID.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const { BASE_URL, MODEL_ID } = process.env;
const client = new OpenAI({ baseURL: BASE_URL, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
const tools = [{
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
}];
const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
// the model could stop by itself before the scripted call: <|end_of_msg|> is biased away
const eom = Number(process.env.EOM_ID);
const extra = { max_tokens: 300, logit_bias: { [eom]: -100 } };

const r = await client.chat.completions.create({ model: MODEL_ID, messages, tools, ...extra });
const c = r.choices[0];
assert.equal(c.finish_reason, 'tool_calls');
assert.equal(c.message.tool_calls.length, 1);
const call = c.message.tool_calls[0];
assert.equal(call.type, 'function');
assert.ok(call.id.startsWith('call_'));
assert.equal(call.function.name, 'get_weather');
assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Oslo' });
assert.equal(c.message.reasoning_content, 'need tool');
console.log('ok - tool call in a whole response');

const stream = await client.chat.completions.create({ model: MODEL_ID, messages, tools, stream: true, ...extra });
const calls = [];
let finish = null;
for await (const chunk of stream) {
  const ch = chunk.choices[0];
  if (!ch) continue;
  for (const d of ch.delta.tool_calls || []) {
    if (!calls[d.index]) calls[d.index] = { id: d.id, name: d.function.name, args: '' };
    calls[d.index].args += d.function.arguments || '';
  }
  if (ch.finish_reason) finish = ch.finish_reason;
}
assert.equal(finish, 'tool_calls');
assert.equal(calls.length, 1);
assert.equal(calls[0].name, 'get_weather');
assert.ok(calls[0].id.startsWith('call_'));
assert.deepEqual(JSON.parse(calls[0].args), { city: 'Oslo' });
console.log('ok - tool call streamed as deltas');

// the SDK's own stream helper assembles the same call
const runner = client.chat.completions.stream({ model: MODEL_ID, messages, tools, ...extra });
const done = await runner.finalChatCompletion();
assert.deepEqual(JSON.parse(done.choices[0].message.tool_calls[0].function.arguments), { city: 'Oslo' });
console.log('ok - the SDK stream helper assembles it');

// the call and its result go back in the history
const next = await client.chat.completions.create({
  model: MODEL_ID,
  messages: [...messages, c.message, { role: 'tool', tool_call_id: call.id, content: '{"sky":"clear"}' }],
  tools,
  ...extra,
});
assert.equal(next.object, 'chat.completion');
console.log('ok - tool result accepted in the history');
