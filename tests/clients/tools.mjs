// tools.mjs: tool calls through real clients from npm against a running xlserve at XL_BASE_URL
// (".../v1"): the `openai` SDK's chat.completions with tools (full, streamed, a tool result fed
// back), LangChain's bindTools and withStructuredOutput({method: "functionCalling"}) with zod 4
// schemas, and the AI SDK's generateText / streamText with tools through
// @ai-sdk/openai-compatible (chat completions). Each check prints "ok NAME" or throws.
// Driven by tests/integration/test_tool_clients.py (pinned packages installed with npm ci).
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import OpenAI from "openai";
import { zodFunction } from "openai/helpers/zod";
import { ChatOpenAI } from "@langchain/openai";
import { tool as lcTool } from "@langchain/core/tools";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { z } from "zod";

if (!globalThis.crypto) globalThis.crypto = webcrypto;

const baseURL = process.env.XL_BASE_URL;
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const MODEL = process.env.XL_MODEL || "tiny";
// the test model is random: it never learnt to close a string or an object, so '"', '}' and ']'
// get a push upwards (the call grammar still decides what may come)
const BIAS = { 34: 4, 125: 4, 93: 2 };

// zod 4 schemas: .int() writes minimum/maximum, .max() maxLength, enums, optional fields
const Weather = z.object({
  city: z.string().min(1).max(8),
  unit: z.enum(["celsius", "fahrenheit"]),
  days: z.number().int().min(1).max(7).optional(),
});
// OpenAI's strict tools (zodFunction) want every field required: optional means nullable
const WeatherStrict = Weather.extend({ days: z.number().int().min(1).max(7).nullable() });
const Search = z.object({ query: z.string().max(12), limit: z.number().int().positive().max(50) });

function reassemble(chunks) {
  const calls = [];
  let finish = null;
  for (const ch of chunks) {
    const c = ch.choices[0];
    if (!c) continue;
    for (const t of c.delta.tool_calls ?? []) {
      if (!calls[t.index]) {
        assert.ok(t.id && t.type === "function" && t.function.name, JSON.stringify(t));
        calls[t.index] = { id: t.id, type: "function",
                           function: { name: t.function.name, arguments: t.function.arguments ?? "" } };
      } else {
        calls[t.index].function.arguments += t.function.arguments ?? "";
      }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { calls, finish };
}

const checks = {
  async openai_chat_tools() {
    const tools = [zodFunction({ name: "get_weather", parameters: WeatherStrict, description: "weather" }),
                   zodFunction({ name: "search", parameters: Search })];
    const messages = [{ role: "user", content: "Weather in Bath?" }];
    for (let seed = 0; seed < 4; seed++) {
      const body = { model: MODEL, messages, tools, tool_choice: "required", seed, temperature: 1,
                     max_tokens: 1500, logit_bias: BIAS };
      const r = await client.chat.completions.create(body);
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls");
      assert.equal(c.message.content, null);
      for (const call of c.message.tool_calls) {
        const schema = { get_weather: WeatherStrict, search: Search }[call.function.name];
        assert.ok(schema, call.function.name);
        schema.parse(JSON.parse(call.function.arguments));
      }
      // the same seed streamed: the deltas reassemble to the same calls
      const chunks = [];
      for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
        chunks.push(ch);
      const { calls, finish } = reassemble(chunks);
      assert.equal(finish, "tool_calls");
      assert.deepEqual(calls.map((x) => x.function), c.message.tool_calls.map((x) => x.function));
      // the SDK's own stream helper accumulates the same message
      const s = client.chat.completions.stream({ ...body });
      const final = await s.finalChatCompletion();
      const nameArgs = (m) => m.tool_calls.map((x) => [x.function.name, x.function.arguments]);
      assert.deepEqual(nameArgs(final.choices[0].message), nameArgs(c.message));
      // zodFunction tools: the helper parsed every call's arguments with the zod schema
      for (const x of final.choices[0].message.tool_calls) assert.ok(x.function.parsed_arguments);
      // a tool result fed back: the model answers text (tool_choice none)
      const next = await client.chat.completions.create({
        ...body, tool_choice: "none", max_tokens: 8,
        messages: [...messages, c.message,
                   ...c.message.tool_calls.map((t) => ({ role: "tool", tool_call_id: t.id, content: "11C" }))],
      });
      assert.equal(typeof next.choices[0].message.content, "string");
    }
    // a named function
    const r = await client.chat.completions.create({
      model: MODEL, messages, tools, seed: 3, temperature: 1, max_tokens: 1500, logit_bias: BIAS,
      tool_choice: { type: "function", function: { name: "search" } }, parallel_tool_calls: false });
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    assert.equal(r.choices[0].message.tool_calls[0].function.name, "search");
    Search.parse(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments));
    // an unknown tool in tool_choice: the SDK's BadRequestError with the param
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages, tools,
                                       tool_choice: { type: "function", function: { name: "nope" } } }),
      (e) => e.status === 400 && e.param === "tool_choice.function.name");
  },

  async langchain_bind_tools() {
    const weather = lcTool(async (x) => `${x.city}: 11C`, {
      name: "get_weather", description: "the weather in a city", schema: Weather });
    const search = lcTool(async (x) => x.query, { name: "search", schema: Search });
    for (let seed = 0; seed < 4; seed++) {
      const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 1500, temperature: 1,
                                    configuration: { baseURL }, maxRetries: 0,
                                    modelKwargs: { seed, logit_bias: BIAS } });
      const bound = chat.bindTools([weather, search], { tool_choice: "required" });
      const msg = await bound.invoke("What is the weather in Bath?");
      assert.ok(msg.tool_calls.length >= 1, JSON.stringify(msg));
      for (const call of msg.tool_calls) {
        assert.ok(call.id);
        ({ get_weather: Weather, search: Search })[call.name].parse(call.args);
      }
      // run the tools and send their results back (ToolMessages) for the next reply
      const results = [];
      for (const call of msg.tool_calls)
        results.push(await ({ get_weather: weather, search: search })[call.name].invoke(call));
      const chat2 = new ChatOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 8, temperature: 0,
                                     configuration: { baseURL }, maxRetries: 0 });
      const reply = await chat2.bindTools([weather, search], { tool_choice: "none" })
        .invoke([["human", "What is the weather in Bath?"], msg, ...results]);
      assert.equal(typeof reply.content, "string");
    }
  },

  async langchain_with_structured_output_function_calling() {
    const Answer = z.object({ answer: z.string().max(10), confidence: z.number().int().min(0).max(100),
                              tags: z.array(z.enum(["a", "b"])).max(2) });
    for (let seed = 0; seed < 4; seed++) {
      const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", maxTokens: 1500, temperature: 1,
                                    configuration: { baseURL }, maxRetries: 0,
                                    modelKwargs: { seed, logit_bias: BIAS } });
      const structured = chat.withStructuredOutput(Answer, { method: "functionCalling", name: "answer" });
      const out = await structured.invoke("Answer me.");
      Answer.parse(out);
    }
  },

  async ai_sdk_tools() {
    const xl = createOpenAICompatible({ name: "xlserve", baseURL, apiKey: "unused" });
    const model = xl.chatModel(MODEL);
    const tools = {
      get_weather: tool({ description: "the weather in a city", inputSchema: Weather }),
      search: tool({ description: "search", inputSchema: Search }),
    };
    for (let seed = 0; seed < 4; seed++) {
      const opts = { model, tools, toolChoice: "required", prompt: "Weather in Bath?", seed,
                     temperature: 1, maxOutputTokens: 1500, maxRetries: 0,
                     providerOptions: { xlserve: { logit_bias: BIAS } } };
      const r = await generateText(opts);
      assert.equal(r.finishReason, "tool-calls");
      assert.ok(r.toolCalls.length >= 1);
      for (const c of r.toolCalls) ({ get_weather: Weather, search: Search })[c.toolName].parse(c.input);
      const s = streamText(opts);
      const streamed = await s.toolCalls;
      assert.equal(await s.finishReason, "tool-calls");
      assert.deepEqual(streamed.map((c) => [c.toolName, c.input]), r.toolCalls.map((c) => [c.toolName, c.input]));
    }
    // a tool with execute: the SDK runs it and sends the result back for a text answer
    let ran = 0;
    const r = await generateText({
      model, prompt: "Weather in Bath?", seed: 1, temperature: 1, maxOutputTokens: 1500, maxRetries: 0,
      tools: { get_weather: tool({ inputSchema: Weather,
                                   execute: async ({ city }) => { ran++; return `${city}: 11C`; } }) },
      toolChoice: "required", stopWhen: stepCountIs(2),
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none", maxOutputTokens: 8 } : {}),
      providerOptions: { xlserve: { logit_bias: BIAS } },
    });
    assert.ok(ran >= 1);
    assert.equal(r.steps.length, 2);
    assert.equal(typeof r.text, "string");
  },
};

const only = process.argv.slice(2);
for (const [name, fn] of Object.entries(checks)) {
  if (only.length && !only.includes(name)) continue;
  await fn();
  console.log(`ok ${name}`);
}
