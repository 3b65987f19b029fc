// Structured output as clients write it: a zod model through openai-node's
// zodResponseFormat + chat.completions.parse (the SDK parses each reply with
// zod and throws on a mismatch), and pydantic's schema for the same kind of
// model; every reply is also validated with ajv, a JSON Schema validator
// independent of both. Sampled at temperature 1 over several seeds with a
// tiny random model, so only the grammar keeps the replies valid. Schemas
// with keywords the grammar does not enforce must get a 400 naming them.
//
// env: BASE_URL, MODEL_ID, PYD_SCHEMA (file), PYD_OUT (file: the pydantic replies)
import fs from 'node:fs';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';

const { BASE_URL, MODEL_ID, PYD_SCHEMA, PYD_OUT } = process.env;
const client = new OpenAI({ baseURL: BASE_URL, apiKey: 'none', maxRetries: 0 });
const messages = [{ role: 'user', content: 'Describe a person.' }];
const SEEDS = [1, 2, 3, 4];
const opts = (seed) => ({ model: MODEL_ID, messages, max_tokens: 3000, temperature: 1, seed });

const fail = (msg) => {
  console.error('FAIL: ' + msg);
  process.exit(1);
};

// ---- zod
const Address = z.object({ street: z.string().max(12), zip: z.string().min(3).max(5) });
const Person = z.object({
  name: z.string().min(1).max(10),
  age: z.number().int().min(0).max(130),
  big: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER), // zod 4's .int()
  score: z.number().min(0).max(1),
  nickname: z.string().max(6).nullable(),
  weight: z.number().min(0).max(500).nullable(), // written with OpenAPI's "nullable": true
  tags: z.array(z.enum(['a', 'b', 'c'])).min(1).max(3),
  address: Address,
  previous: z.array(Address).max(2), // a second use: zod writes a definitions entry and a $ref
  kind: z.literal('person'),
});
const zf = zodResponseFormat(Person, 'person');
const ajv7 = new Ajv({ strict: false, allErrors: true });
const zodValid = ajv7.compile(zf.json_schema.schema);
for (const seed of SEEDS) {
  let r;
  try {
    r = await client.chat.completions.parse({ ...opts(seed), response_format: zf });
  } catch (e) {
    fail(`zod seed ${seed}: the SDK refused the reply: ${e.message}`);
  }
  const m = r.choices[0].message;
  if (r.choices[0].finish_reason !== 'stop') fail(`zod seed ${seed}: finish ${r.choices[0].finish_reason}`);
  if (!m.parsed) fail(`zod seed ${seed}: nothing parsed: ${m.content}`);
  if (!zodValid(JSON.parse(m.content)))
    fail(`zod seed ${seed}: ajv: ${JSON.stringify(zodValid.errors)} in ${m.content}`);
}
console.log(`zod ok: ${SEEDS.length} replies parsed by the SDK and valid for ajv`);

// ---- pydantic
const pyd = JSON.parse(fs.readFileSync(PYD_SCHEMA, 'utf8'));
const ajv = pyd.$defs ? new Ajv2020({ strict: false, allErrors: true }) : ajv7;
const pydValid = ajv.compile(pyd);
const texts = [];
for (const seed of SEEDS) {
  const r = await client.chat.completions.create({
    ...opts(seed),
    response_format: { type: 'json_schema', json_schema: { name: 'Person', schema: pyd } },
  });
  const c = r.choices[0];
  if (c.finish_reason !== 'stop') fail(`pydantic seed ${seed}: finish ${c.finish_reason}`);
  let v;
  try {
    v = JSON.parse(c.message.content);
  } catch (e) {
    fail(`pydantic seed ${seed}: not JSON: ${c.message.content}`);
  }
  if (!pydValid(v)) fail(`pydantic seed ${seed}: ajv: ${JSON.stringify(pydValid.errors)} in ${c.message.content}`);
  texts.push(c.message.content);
}
fs.writeFileSync(PYD_OUT, JSON.stringify(texts));
console.log(`pydantic schema ok: ${SEEDS.length} replies valid for ajv`);

// ---- the grammar's limits are named, not ignored
for (const [schema, word] of [
  [{ type: 'object', properties: { e: { type: 'string', pattern: '^[a-z]+$' } } }, 'pattern'],
  [{ type: 'object', properties: { e: { type: 'string', format: 'email' } } }, 'format'],
  [{ type: 'object', properties: { n: { type: 'integer', multipleOf: 5 } } }, 'multipleOf'],
  [{ type: 'object', properties: { m: { type: 'object', additionalProperties: { type: 'integer' } } } }, 'additionalProperties'],
]) {
  try {
    await client.chat.completions.create({
      ...opts(1),
      response_format: { type: 'json_schema', json_schema: { name: 's', schema } },
    });
    fail(`a schema with ${word} was accepted`);
  } catch (e) {
    if (e.status !== 400 || !String(e.message).includes(word) || e.param !== 'response_format.json_schema.schema')
      fail(`${word}: ${e.status} ${e.message} (param ${e.param})`);
  }
}
console.log('unenforced keywords: 400 naming them');
