// responses.mjs: the Responses API through real npm clients against a running xlserve at
// XL_BASE_URL (".../v1"): the `openai` SDK's client.responses.create / stream / retrieve /
// parse, and the AI SDK's default OpenAI provider (`openai(model)` from @ai-sdk/openai, which
// speaks the Responses API) with generateText / streamText. Each check prints "ok NAME" or
// throws. Driven by tests/integration/test_npm_clients.py (the pinned packages of package.json).
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const baseURL = process.env.XL_BASE_URL;
const MODEL = process.env.XL_MODEL || "tiny";
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });

const WEATHER = { type: "function", name: "get_weather", description: "The weather in a city",
                  parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } },
                                required: ["city"], additionalProperties: false },
                  strict: true };

const checks = {
  // a function call (its arguments validate), then its output continues the response
  async openai_responses_tools() {
    const r1 = await client.responses.create({ model: MODEL, input: "Weather in Paris?",
                                               tools: [WEATHER], tool_choice: "required",
                                               parallel_tool_calls: false, max_output_tokens: 200 });
    const [call] = r1.output;
    assert.equal(call.type, "function_call");
    assert.equal(call.name, "get_weather");
    assert.equal(typeof JSON.parse(call.arguments).city, "string");
    const r2 = await client.responses.create({ model: MODEL, previous_response_id: r1.id,
                                               tools: [WEATHER], tool_choice: "none",
                                               input: [{ type: "function_call_output", call_id: call.call_id,
                                                         output: JSON.stringify({ temp: 21 }) }],
                                               max_output_tokens: 8 });
    assert.equal(r2.output[0].type, "message");
    assert.equal(r2.xlserve.session_tokens, r1.xlserve.session_tokens + r2.usage.total_tokens);
  },

  // the AI SDK's tool loop on the default provider: a call, its result, then text
  async ai_sdk_tools() {
    const { openai } = await import("@ai-sdk/openai");
    const seen = [];
    const r = await generateText({
      model: openai(MODEL), prompt: "Weather in Paris?", maxOutputTokens: 200, maxRetries: 0,
      tools: { get_weather: tool({ description: "The weather in a city",
                                   inputSchema: z.object({ city: z.string().max(12) }),
                                   execute: async ({ city }) => { seen.push(city); return { temp: 21 }; } }) },
      toolChoice: "required", stopWhen: stepCountIs(2),
      providerOptions: { openai: { parallelToolCalls: false } },
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none" } : {}),
    });
    assert.equal(r.steps.length, 2);
    assert.ok(r.steps[0].toolCalls.length >= 1);
    assert.equal(r.steps[0].toolCalls[0].toolName, "get_weather");
    assert.equal(typeof seen[0], "string");
    assert.deepEqual(r.steps[0].toolResults[0].output, { temp: 21 });
    assert.equal(r.steps[1].toolCalls.length, 0);
    assert.equal(typeof r.text, "string");
  },

  // create, continue with previous_response_id (the session grows by the new turn only),
  // retrieve, delete
  async openai_responses_create() {
    const r1 = await client.responses.create({ model: MODEL, input: "Hello there",
                                               instructions: "Be brief", max_output_tokens: 10,
                                               seed: 3 });
    assert.equal(r1.object, "response");
    assert.equal(r1.status, "incomplete");
    assert.equal(r1.usage.output_tokens, 10);
    assert.equal(r1.output_text, r1.output[0].content[0].text); // the SDK's own join
    const r2 = await client.responses.create({ model: MODEL, previous_response_id: r1.id,
                                               input: [{ role: "user", content: [{ type: "input_text", text: "More" }] }],
                                               max_output_tokens: 10 });
    assert.equal(r2.previous_response_id, r1.id);
    assert.equal(r2.xlserve.session_tokens, r1.xlserve.session_tokens + r2.usage.total_tokens);
    const got = await client.responses.retrieve(r2.id);
    assert.equal(got.id, r2.id);
    assert.equal(got.output_text, r2.output_text);
    const items = await client.responses.inputItems.list(r2.id);
    assert.deepEqual(items.data.map((i) => i.content[0].text), ["More"]);
    await client.responses.delete(r2.id);
    await assert.rejects(client.responses.retrieve(r2.id), (e) => e.status === 404);
    await assert.rejects(
      client.responses.create({ model: MODEL, input: "x", previous_response_id: r2.id }),
      (e) => e.status === 404);
  },

  // create({stream: true}) and the stream helper: the events in order, the text of the deltas
  // is the final response's
  async openai_responses_stream() {
    const s = await client.responses.create({ model: MODEL, input: "Stream", max_output_tokens: 8,
                                              seed: 4, stream: true });
    const types = [];
    let text = "", final = null;
    for await (const ev of s) {
      types.push(ev.type);
      assert.equal(ev.sequence_number, types.length - 1);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
    }
    assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress",
                                         "response.output_item.added", "response.content_part.added"]);
    assert.equal(types.at(-1), "response.incomplete");
    assert.equal(final.output[0].content[0].text, text);
    const helper = client.responses.stream({ model: MODEL, input: "Stream", max_output_tokens: 8,
                                             seed: 4 });
    let deltas = "";
    helper.on("response.output_text.delta", (ev) => { deltas += ev.delta; });
    const done = await helper.finalResponse();
    assert.equal(deltas, text); // seeded: the same text again
    assert.equal(done.output_text, text);
    const kept = await client.responses.retrieve(done.id);
    assert.equal(kept.output_text, text);
  },

  // text.format json_schema from a zod schema, parsed by the SDK
  async openai_responses_parse() {
    const Answer = z.object({ ok: z.boolean(), word: z.enum(["yes", "no"]) });
    const r = await client.responses.parse({ model: MODEL, input: "JSON please",
                                             max_output_tokens: 60, seed: 1,
                                             text: { format: zodTextFormat(Answer, "answer") } });
    assert.equal(r.status, "completed");
    assert.equal(typeof r.output_parsed.ok, "boolean");
    assert.ok(["yes", "no"].includes(r.output_parsed.word));
  },

  // the AI SDK's default provider: openai(model) speaks the Responses API (OPENAI_BASE_URL)
  async ai_sdk_generate_text() {
    const { openai } = await import("@ai-sdk/openai");
    const r = await generateText({ model: openai(MODEL), prompt: "Hello", maxOutputTokens: 10,
                                   maxRetries: 0 });
    assert.equal(typeof r.text, "string");
    assert.equal(r.usage.outputTokens, 10);
    assert.equal(r.finishReason, "length");
    const id = r.providerMetadata.openai.responseId;
    assert.match(id, /^resp_/);
    const stored = await client.responses.retrieve(id);
    assert.equal(stored.output_text, r.text);
    // the next turn continues the stored response's session
    const r2 = await generateText({ model: openai(MODEL), prompt: "Again", maxOutputTokens: 5,
                                    maxRetries: 0,
                                    providerOptions: { openai: { previousResponseId: id } } });
    const s2 = await client.responses.retrieve(r2.providerMetadata.openai.responseId);
    assert.equal(s2.previous_response_id, id);
    assert.equal(s2.xlserve.session_id, stored.xlserve.session_id);
    // a conversation sent whole (system, user, assistant, user) in a new response
    const r3 = await generateText({ model: createOpenAI({ baseURL, apiKey: "unused" }).responses(MODEL),
                                    system: "Be brief",
                                    messages: [{ role: "user", content: "Hi" },
                                               { role: "assistant", content: r.text },
                                               { role: "user", content: "Bye" }],
                                    maxOutputTokens: 4, maxRetries: 0,
                                    providerOptions: { openai: { store: false } } });
    assert.equal(r3.usage.outputTokens, 4);
  },

  async ai_sdk_stream_text() {
    const model = createOpenAI({ baseURL, apiKey: "unused" }).responses(MODEL);
    const res = streamText({ model, prompt: "Stream it", maxOutputTokens: 8,
                             maxRetries: 0, onError: ({ error }) => { throw error; } });
    let text = "";
    for await (const t of res.textStream) text += t;
    assert.equal(text, await res.text);
    assert.equal((await res.usage).outputTokens, 8);
    assert.equal(await res.finishReason, "length");
    const id = (await res.providerMetadata).openai.responseId;
    const stored = await client.responses.retrieve(id);
    assert.equal(stored.output_text, text);
  },
};

const name = process.argv[2];
if (!checks[name]) throw new Error(`unknown check ${name}; known: ${Object.keys(checks).join(", ")}`);
await checks[name]();
console.log(`ok ${name}`);
