// clients.mjs: real OpenAI-API clients from npm (the `openai` SDK and LangChain's
// `@langchain/openai`) against a running xlserve at XL_BASE_URL (".../v1"). Each check prints
// one line "ok NAME" or throws; the process exits non-zero on the first failure.
// Driven by tests/integration/test_npm_clients.py (which installs the pinned packages with npm ci).
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { ChatOpenAI, OpenAI as LangChainOpenAI } from "@langchain/openai";
import { z } from "zod";

// Debian 12's Node.js is 18, where the global Web Crypto `crypto` (LangChain's tracing client
// draws its UUIDs from it) needs a flag; 20 and later have it
if (!globalThis.crypto) globalThis.crypto = webcrypto;

const baseURL = process.env.XL_BASE_URL;
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const MODEL = process.env.XL_MODEL || "tiny";
// the test model is random: it never learnt to close a string, so bias '"' and '}' upwards
const CLOSE_BIAS = { 34: 6, 125: 6 };

async function completionRequests() { // from the daemon's metrics
  const text = await (await fetch(baseURL.replace(/\/v1$/, "") + "/metrics")).text();
  const m = text.match(/^xlserve_requests_total\{route="completions",status="200"\} (\d+)/m);
  return m ? Number(m[1]) : 0;
}

const checks = {
  async openai_completions_n() {
    const r = await client.completions.create({ model: MODEL, prompt: "It is a truth", max_tokens: 8,
                                                n: 3, seed: 7, temperature: 1 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(r.usage.prompt_tokens, "It is a truth".length);
    assert.equal(r.usage.completion_tokens, 24);
    const one = await client.completions.create({ model: MODEL, prompt: "It is a truth", max_tokens: 8,
                                                  seed: 7, temperature: 1 });
    assert.equal(r.choices[0].text, one.choices[0].text);
  },

  // Scoring through the SDK: echo + logprobs, as a string prompt and as lm-evaluation-harness
  // sends it (a batch of token-id lists). XL_ECHO_TEXT is ASCII (one byte token per character);
  // XL_ECHO_NLL names `xlserve eval --dump-nll`'s output for it: -log p(t[i+1] | t[..i]).
  async openai_completions_echo_logprobs() {
    const text = process.env.XL_ECHO_TEXT;
    const nll = (await import("node:fs")).readFileSync(process.env.XL_ECHO_NLL, "utf8")
      .trim().split(/\s+/).map(Number);
    assert.equal(nll.length, text.length - 1);
    // the daemon's numbers against eval's: 1e-5 per token (a sum of k tokens: k * 1e-5)
    const near = (got, want, what, k = 1) =>
      assert.ok(Math.abs(got - want) < 1e-5 * k, `${what}: ${got} vs ${want}`);
    const r = await client.completions.create({ model: MODEL, prompt: text, echo: true,
                                                logprobs: 3, max_tokens: 0 });
    const c = r.choices[0];
    assert.equal(c.text, text);
    const lp = c.logprobs;
    assert.deepEqual(lp.tokens, [...text]);
    assert.deepEqual(lp.text_offset, [...text].map((_, i) => i));
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < text.length; i++) {
      near(lp.token_logprobs[i], -nll[i - 1], `token ${i}`);
      const top = Object.values(lp.top_logprobs[i]);
      assert.equal(top.length, 3);
      assert.ok(lp.token_logprobs[i] <= Math.max(...top));
    }
    assert.deepEqual(r.usage, { prompt_tokens: text.length, completion_tokens: 0,
                                total_tokens: text.length });
    // lm-evaluation-harness's local-completions request: prompt [[ids], [ids]], max_tokens 1;
    // it sums token_logprobs[ctxlen:-1] (the last one is the generated token)
    const ids = [...Buffer.from(text)];
    const cut = Math.floor(text.length / 2);
    const h = await client.completions.create({ model: MODEL, prompt: [ids, ids.slice(0, cut)],
                                                echo: true, logprobs: 1, max_tokens: 1,
                                                temperature: 0, seed: 1234 });
    assert.deepEqual(h.choices.map((x) => x.index), [0, 1]);
    for (const [k, len] of [[0, ids.length], [1, cut]]) {
      const t = h.choices[k].logprobs.token_logprobs;
      assert.equal(t.length, len + 1);
      const ctxlen = 1;
      const sum = t.slice(ctxlen, -1).reduce((a, b) => a + b, 0);
      const want = -nll.slice(ctxlen - 1, len - 1).reduce((a, b) => a + b, 0);
      near(sum, want, `loglikelihood of prompt ${k}`, len - ctxlen);
    }
  },

  async openai_chat_stream_n() {
    const stream = await client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 10, n: 3, seed: 3,
      stream: true, stream_options: { include_usage: true } });
    const text = {}, finish = {};
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text[c.index] = (text[c.index] || "") + (c.delta.content || "");
        if (c.finish_reason) finish[c.index] = c.finish_reason;
      }
    }
    assert.deepEqual(Object.keys(finish).sort(), ["0", "1", "2"]);
    assert.equal(usage.completion_tokens > 0, true);
    const whole = await client.chat.completions.create({
      model: MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 10, n: 3, seed: 3 });
    assert.deepEqual(whole.choices.map((c) => c.message.content), [0, 1, 2].map((i) => text[i]));
  },

  async openai_parse_json_schema() {
    const Person = z.object({
      name: z.string().max(10),
      age: z.number().int(),
      tags: z.array(z.enum(["a", "b", "c"])).max(3),
      email: z.string().max(12).nullable(),
    });
    for (let seed = 0; seed < 20; seed++) {
      const r = await client.chat.completions.parse({
        model: MODEL, messages: [{ role: "user", content: "Describe a person." }], max_tokens: 400,
        seed, temperature: 1, response_format: zodResponseFormat(Person, "person") });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, "stop");
      assert.ok(m.parsed, m.content);
      Person.parse(m.parsed); // the SDK parsed it; validate again
    }
  },

  async langchain_generate_several_prompts() {
    const llm = new LangChainOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 6, temperature: 0,
                                      configuration: { baseURL }, maxRetries: 0 });
    const prompts = ["Once upon", "It is a truth", "Call me"];
    const before = await completionRequests();
    const res = await llm.generate(prompts);
    assert.equal(await completionRequests(), before + 1); // one request: a list of prompts
    assert.equal(res.generations.length, 3);
    for (let i = 0; i < 3; i++) {
      const one = await client.completions.create({ model: MODEL, prompt: prompts[i], max_tokens: 6,
                                                    temperature: 0 });
      assert.equal(res.generations[i][0].text, one.choices[0].text);
    }
  },

  async langchain_with_structured_output_json_schema() {
    const Answer = z.object({ answer: z.string().max(8), confidence: z.number(),
                              ok: z.boolean() });
    for (let seed = 0; seed < 10; seed++) {
      const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 400, temperature: 1,
                                    configuration: { baseURL }, maxRetries: 0,
                                    modelKwargs: { seed } });
      const structured = chat.withStructuredOutput(Answer, { method: "jsonSchema", name: "answer" });
      const out = await structured.invoke("Answer me.");
      Answer.parse(out); // Zod counts string length in UTF-16 units
    }
  },

  async langchain_with_structured_output_json_mode() {
    const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 2000, temperature: 0.8,
                                  configuration: { baseURL }, maxRetries: 0,
                                  modelKwargs: { logit_bias: CLOSE_BIAS, seed: 1 } });
    const Any = z.object({}).passthrough();
    const structured = chat.withStructuredOutput(Any, { method: "jsonMode", includeRaw: true });
    const out = await structured.invoke("Reply in JSON.");
    const raw = out.raw.content;
    assert.equal(typeof JSON.parse(raw), "object", raw); // an object, as json_object promises
    assert.ok(out.parsed, raw);
  },
};

const only = process.argv.slice(2);
for (const [name, fn] of Object.entries(checks)) {
  if (only.length && !only.includes(name)) continue;
  await fn();
  console.log(`ok ${name}`);
}
