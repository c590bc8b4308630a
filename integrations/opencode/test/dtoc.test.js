// The plugin against the REAL service: `dtoc-rl serve --policy last_n:n=2 --port 0` on 127.0.0.1.
// Run with `node --test test/dtoc.test.js` (the pytest wrapper sets DTOC_PYTHON to its interpreter).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { readFileSync } from "node:fs";
import * as plugin from "../dtoc.js";
import { DtocContextPlugin } from "../dtoc.js";
import { startService } from "./service.js";

const PYTHON = process.env.DTOC_PYTHON || "python3";
const SID = "ses_test";
const STATE = Symbol.for("dtoc.state");
// The service needs a bearer token on every endpoint but /health; the plugin reads DTOC_TOKEN,
// and the service started below gets the same one from its environment.
const TOKEN = "plugin-test-" + Math.random().toString(36).slice(2);
process.env.DTOC_TOKEN = TOKEN;
delete process.env.DTOC_MODEL;

/** @type {import("node:child_process").ChildProcess | null} */
let proc = null;
let url = "";

before(
  async () => {
    ({ url, proc } = await startService({ policy: "last_n:n=2", token: TOKEN, python: PYTHON }));
  },
  { timeout: 120_000 },
);
after(() => {
  if (proc && proc.exitCode === null) proc.kill("SIGTERM");
});

/** A fake OpenCode session history. */
function user(text) {
  return {
    info: { id: "msg_u" + text.length, role: "user", sessionID: SID, model: { providerID: "openai", modelID: "gpt-4o" } },
    parts: [{ id: "prt_u", sessionID: SID, messageID: "msg_u", type: "text", text }],
  };
}

/** @param {number} i @param {string} output */
function assistantWithTool(i, output) {
  const now = 1_700_000_000_000 + i * 1000;
  return {
    info: { id: `msg_a${i}`, role: "assistant", sessionID: SID, modelID: "gpt-4o", providerID: "openai" },
    parts: [
      { id: `prt_t${i}`, sessionID: SID, messageID: `msg_a${i}`, type: "text", text: `step ${i}` },
      {
        id: `prt_${i}`,
        sessionID: SID,
        messageID: `msg_a${i}`,
        type: "tool",
        callID: `call_${i}`,
        tool: "bash",
        state: {
          status: "completed",
          input: { command: `cat file${i}.py` },
          output,
          title: `cat file${i}.py`,
          metadata: {},
          time: { start: now, end: now + 5 },
        },
      },
    ],
  };
}

const OUTPUTS = [0, 1, 2, 3].map((i) => `def function_${i}():\n    return ${i}\n`.repeat(30));

/** Run one tool through the plugin as OpenCode would and append it to the history. */
async function runTool(hooks, history, i) {
  const out = { title: `cat file${i}.py`, output: OUTPUTS[i], metadata: {} };
  await hooks["tool.execute.after"]({ tool: "bash", sessionID: SID, callID: `call_${i}`, args: { command: `cat file${i}.py` } }, out);
  assert.equal(out.output, OUTPUTS[i], "a fresh output is shown in full");
  history.push(assistantWithTool(i, OUTPUTS[i]));
}

/** @param {any[]} messages */
function toolOutputs(messages) {
  return messages.flatMap((m) => m.parts.filter((p) => p.type === "tool").map((p) => p.state.output));
}

/** @param {string} text */
function hiddenKey(text) {
  try {
    const o = JSON.parse(text);
    return o && o.hidden === true ? o.tool_key : null;
  } catch {
    return null;
  }
}

/**
 * Runs `body` with Date.now on a clock that only `advance(ms)` moves (the plugin times waits with it).
 * @param {(advance: (ms: number) => void) => Promise<void>} body
 */
async function onFakeClock(body) {
  const realNow = Date.now;
  let clock = 1_800_000_000_000;
  Date.now = () => clock;
  try {
    await body((ms) => {
      clock += ms;
    });
  } finally {
    Date.now = realNow;
  }
}

/** A fetch that records every request body (and the answer's status) on its way to the service. */
function recordingFetch() {
  /** @type {any[]} */
  const bodies = [];
  /** @type {number[]} */
  const statuses = [];
  /** @type {any[]} */
  const headers = [];
  /** @type {typeof fetch} */
  const spy = async (input, init) => {
    bodies.push(JSON.parse(String(init?.body)));
    headers.push(init?.headers);
    const res = await fetch(input, init);
    statuses.push(res.status);
    return res;
  };
  return { bodies, statuses, headers, spy };
}

test("the module exports only the plugin factory (OpenCode calls every export)", () => {
  const exported = Object.entries(plugin);
  assert.deepEqual(
    exported.map(([k]) => k),
    ["DtocContextPlugin"],
  );
  assert.equal(typeof DtocContextPlugin, "function");
});

test("outputs are hidden behind placeholders by the service's decisions and come back when re-enabled", async () => {
  const hooks = await DtocContextPlugin({}, { url });
  const state = hooks[STATE];
  const history = [user("Fix the bug in file3.py")];
  for (let i = 0; i < 4; i++) {
    await runTool(hooks, history, i);
    // every model call sees the history through the transform (messages mutated in place,
    // as if OpenCode kept them between calls)
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  let outs = toolOutputs(history);
  // last_n:n=2 keeps the two most recent outputs; the older two become placeholders
  assert.deepEqual(outs.map(hiddenKey), ["t0000", "t0001", null, null]);
  assert.equal(outs[2], OUTPUTS[2]);
  assert.equal(outs[3], OUTPUTS[3]);
  const ph = JSON.parse(outs[0]);
  assert.equal(ph.estimated_tokens, Math.ceil(OUTPUTS[0].length / 4));
  assert.match(ph.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.ok(outs[0].length < 300, "a placeholder is short");
  assert.ok(!state.sessions.get(SID).degraded);
  assert.equal(state.stats.failures, 0);

  // a fresh copy of the stored history (OpenCode re-reads it before each call) gets the same view
  const fresh = [user("Fix the bug in file3.py"), ...[0, 1, 2, 3].map((i) => assistantWithTool(i, OUTPUTS[i]))];
  await hooks["experimental.chat.messages.transform"]({}, { messages: fresh });
  assert.deepEqual(toolOutputs(fresh).map(hiddenKey), ["t0000", "t0001", null, null]);

  // the user reverts the last two steps: only two outputs are left, and last_n:n=2
  // enables them again: the plugin writes the originals back into the (mutated) parts
  history.splice(3, 2);
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  outs = toolOutputs(history);
  assert.deepEqual(outs, [OUTPUTS[0], OUTPUTS[1]]);
  assert.equal(state.sessions.get(SID).items.size, 2);
});

test("prefetch from tool.execute.after is reused by the next transform", async () => {
  let calls = 0;
  /** @type {typeof fetch} */
  const counting = (input, init) => {
    calls++;
    return fetch(input, init);
  };
  const hooks = await DtocContextPlugin({}, { url, fetch: counting, labels: false });
  const history = [user("task")];
  for (let i = 0; i < 3; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  // one request per tool (the prefetch), none extra per transform when nothing else changed
  assert.equal(calls, 3);
  assert.deepEqual(toolOutputs(history).map(hiddenKey), ["t0000", null, null]);
});

test("each turn goes to the service once, which labels what later turns needed", async () => {
  const { bodies, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const state = hooks[STATE];
  const history = [user("Fix the bug in file3.py")];
  for (let i = 0; i < 3; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  // the agent quotes an identifier that only file0.py's output showed: a provenance need on t0000
  const quote = assistantWithTool(3, OUTPUTS[3]);
  quote.parts[0].text = "function_0 is the culprit";
  history.push(quote);
  await hooks["tool.execute.after"]({ tool: "bash", sessionID: SID, callID: "call_3", args: {} }, { title: "", output: OUTPUTS[3], metadata: {} });
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  assert.deepEqual(bodies.map((b) => b.turns.map((t) => t.index)), [[0], [1], [2], [3]], "each turn once");
  assert.equal(bodies[0].task, "Fix the bug in file3.py");
  assert.equal(bodies[0].turns[0].calls[0].key, "t0000");
  assert.equal(bodies[0].turns[0].calls[0].output, OUTPUTS[0]);
  assert.equal(new Set(bodies.map((b) => b.session)).size, 1);
  assert.ok(state.sessions.get(SID).needed.t0000 >= 1, JSON.stringify(state.sessions.get(SID).needed));
  assert.equal(state.sessions.get(SID).sentTurns, 4);

  // a revert: the service's copy is stale, so the plugin starts a new one and sends every turn left
  history.splice(3, 2);
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  const last = bodies[bodies.length - 1];
  assert.deepEqual(last.turns.map((/** @type {any} */ t) => t.index), [0, 1]);
  assert.notEqual(last.session, bodies[0].session);
});

test("the user's words since the last answer go with the call they open, and then with their turn", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const history = [user("Fix the bug in file3.py")];
  await runTool(hooks, history, 0);
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  history.push(user("Now look at file1.py"));
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  await runTool(hooks, history, 1);
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  const sent = bodies.filter((b) => b.session);
  assert.deepEqual(sent.map((b) => b.pending_user_text), [undefined, "Now look at file1.py", undefined]);
  assert.deepEqual(sent.map((b) => b.step), [1, 1, 2]);
  assert.equal(sent[2].turns[0].user_text, "Now look at file1.py");
  assert.ok(statuses.every((c) => c === 200), statuses.join());
});

test("turns too large for one request are cut to fit, and labelling goes on", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const state = hooks[STATE];
  const big = "数据".repeat(400_000); // 800k characters, 2.4 MB of UTF-8
  const history = [user("task " + big)];
  for (let i = 0; i < 2; i++) {
    const m = assistantWithTool(i, OUTPUTS[i]);
    m.parts[0].text = big;
    m.parts.push({ ...m.parts[1], id: `prt_x${i}`, callID: `call_x${i}`, state: { ...m.parts[1].state, output: big } });
    history.push(m);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  assert.deepEqual(statuses, [200, 200]);
  assert.ok(bodies.every((b) => new TextEncoder().encode(JSON.stringify(b)).length < 1_000_000));
  assert.equal(state.sessions.get(SID).sentTurns, 2);
  assert.ok(!state.sessions.get(SID).degraded && !state.sessions.get(SID).labelsOff);
});

test("a revert that replaced a turn, or a service that lost the session, gets every turn again at once", async () => {
  const { bodies, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const s = () => hooks[STATE].sessions.get(SID);
  const history = [user("task")];
  for (let i = 0; i < 3; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  // the last step is reverted and redone differently: as many messages as before
  history[3] = assistantWithTool(3, OUTPUTS[3]);
  history[3].info.id = "msg_redone";
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  let last = bodies[bodies.length - 1];
  assert.notEqual(last.session, bodies[0].session);
  assert.deepEqual(last.turns.map((/** @type {any} */ t) => t.index), [0, 1, 2]);
  // the service no longer knows the session (e.g. it restarted): 409, then at once all turns anew
  s().generation += 5;
  const before = bodies.length;
  history.push(assistantWithTool(4, OUTPUTS[0]));
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  assert.equal(bodies.length, before + 2, "one refused request, one retry");
  last = bodies[bodies.length - 1];
  assert.deepEqual(last.turns.map((/** @type {any} */ t) => t.index), [0, 1, 2, 3]);
  assert.ok(!s().degraded && s().sentTurns === 4);
});

test("a long session sends the texts of the service's window of items only, and every item's visibility", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const history = [user("task")];
  const n = 140; // past the service's default max_items (128)
  for (let i = 0; i < n; i++) {
    const out = { title: `cat file${i}.py`, output: OUTPUTS[i % 4], metadata: {} };
    await hooks["tool.execute.after"]({ tool: "bash", sessionID: SID, callID: `call_${i}`, args: { command: `cat file${i}.py` } }, out);
    history.push(assistantWithTool(i, OUTPUTS[i % 4]));
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  assert.ok(statuses.every((st) => st === 200));
  const sent = bodies.filter((b) => b.session);
  assert.equal(sent.length, n);
  const last = sent[sent.length - 1];
  assert.equal(last.items.length, n);
  const withTexts = last.items.filter((/** @type {any} */ it) => "args" in it);
  assert.equal(withTexts.length, 128);
  assert.equal(withTexts[0].key, "t0012", "the most recent carry their texts");
  assert.deepEqual(Object.keys(last.items[0]).sort(), ["key", "tokens", "visible"]);
  assert.equal(last.items[0].visible, false, "hidden before it left the window, and said so");
  // last_n:n=2 hid every older output, including those that left the window (they stay hidden)
  const outputs = toolOutputs(history);
  assert.equal(outputs.filter((o) => hiddenKey(o) !== null).length, n - 2);
  assert.equal(hiddenKey(outputs[0]), "t0000");
  // the texts no longer grow with the session: an older item costs its key, size and visibility
  const size = (/** @type {any} */ b) => new TextEncoder().encode(JSON.stringify({ ...b, turns: [] })).length;
  assert.ok(size(last) - size(sent[127]) < 12 * 60, `${size(last)} vs ${size(sent[127])}`);
  const s = hooks[STATE].sessions.get(SID);
  assert.ok(!s.degraded && !s.labelsOff && s.sentTurns === n);
});

test("big tool inputs leave the turns less room, and a pruned output is still sent with its turn", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const s = () => hooks[STATE].sessions.get(SID);
  const m = assistantWithTool(0, OUTPUTS[0]);
  const tool = m.parts[1];
  m.parts = [m.parts[0]];
  for (let k = 0; k < 36; k++) {
    // 36 writes of 19,500 characters: about 700 KB of item metadata in every request
    m.parts.push({ ...tool, id: `prt_w${k}`, callID: `call_w${k}`, state: { ...tool.state, input: { content: String(k).repeat(19_500) } } });
  }
  const history = [user("task"), m];
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  assert.deepEqual(statuses, [200]);
  assert.ok(!s().labelsOff && s().sentTurns === 1);
  // OpenCode prunes one output; a later resend (the service lost the session) still has it
  m.parts[1].state = { ...m.parts[1].state, time: { ...m.parts[1].state.time, compacted: Date.now() } };
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  s().generation += 5;
  history.push(assistantWithTool(1, OUTPUTS[1]));
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  const last = bodies[bodies.length - 1];
  assert.equal(last.turns[0].index, 0);
  assert.ok(last.turns[0].calls.some((/** @type {any} */ c) => c.key === "t0000"), "the pruned output's call");
  assert.equal(statuses[statuses.length - 1], 200);
});

test("tool inputs too big together for one request are cut to fit, not refused", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const m = assistantWithTool(0, OUTPUTS[0]);
  const tool = m.parts[1];
  m.parts = [m.parts[0]];
  for (let k = 0; k < 64; k++) {
    // 64 writes of 19,500 characters: 1.25 MB of tool inputs, over the service's 1 MiB body limit
    m.parts.push({ ...tool, id: `prt_w${k}`, callID: `call_w${k}`, state: { ...tool.state, input: { content: String(k % 10).repeat(19_500) } } });
  }
  await hooks["experimental.chat.messages.transform"]({}, { messages: [user("task"), m] });
  assert.deepEqual(statuses, [200]);
  const body = bodies[0];
  assert.equal(body.items.length, 64);
  assert.ok(new TextEncoder().encode(JSON.stringify(body)).length < 1_000_000);
  assert.ok(body.items.every((/** @type {any} */ it) => it.args.length >= 300 && it.args.length < 19_500));
  assert.equal(body.turns.length, 1, "the turn still goes with it");
  assert.ok(!hooks[STATE].sessions.get(SID).degraded);
});

test("a failed tool call is sent as an error output", async () => {
  const { bodies, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const history = [user("task")];
  await runTool(hooks, history, 0);
  const failed = assistantWithTool(1, "");
  failed.parts[1].state = { status: "error", input: { command: "edit" }, error: "No replacement was performed", time: { start: 1, end: 2 } };
  history.push(failed);
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  const call = bodies[bodies.length - 1].turns[1].calls[0];
  assert.deepEqual([call.output, call.is_error, call.key], ["No replacement was performed", true, "err:call_1"]);
});

test("the wait since the model's last response is sent, timed from its first tool's start", async () => {
  const { bodies, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy, labels: false });
  await onFakeClock(async (advance) => {
    const history = [user("task")];
    await runTool(hooks, history, 0); // no tool.execute.before seen: the wait is unknown, not sent
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.ok(bodies.every((b) => !("idle_seconds" in b)), JSON.stringify(bodies.map((b) => Object.keys(b))));
    // a response with two tools: the first one's start is when the model stopped answering
    await hooks["tool.execute.before"]({ tool: "bash", sessionID: SID, callID: "call_1" }, { args: {} });
    advance(200_000);
    await hooks["tool.execute.before"]({ tool: "bash", sessionID: SID, callID: "call_2" }, { args: {} });
    advance(201_000); // the tools ran 401 s in all
    await runTool(hooks, history, 1);
    await runTool(hooks, history, 2);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.equal(bodies[bodies.length - 1].idle_seconds, 401);
    // the next response's tool times the next wait
    await hooks["tool.execute.before"]({ tool: "bash", sessionID: SID, callID: "call_3" }, { args: {} });
    advance(5_000);
    await runTool(hooks, history, 3);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.equal(bodies[bodies.length - 1].idle_seconds, 5);
    assert.ok(statuses.every((c) => c === 200), String(statuses));
  });
});

test("a response with no tool times the next wait from its call, and a stale prefetch is asked again", async () => {
  const { bodies, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy, labels: false });
  await onFakeClock(async (advance) => {
    const history = [user("task")];
    await hooks["tool.execute.before"]({ tool: "bash", sessionID: SID, callID: "call_0" }, { args: {} });
    advance(290_000);
    await runTool(hooks, history, 0);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.equal(bodies[bodies.length - 1].idle_seconds, 290);
    // the model answers in text only; the user replies 35 s after that call
    history.push({
      info: { id: "msg_text", role: "assistant", sessionID: SID, modelID: "gpt-4o", providerID: "openai" },
      parts: [{ id: "prt_text", sessionID: SID, messageID: "msg_text", type: "text", text: "done?" }],
    });
    advance(35_000);
    history.push(user("go on please"));
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.equal(bodies[bodies.length - 1].idle_seconds, 35, "timed from the text-only call, not the tool 325 s ago");
    // a prefetch asked at a tool's end is not reused an hour later: its idle_seconds would say 1
    await hooks["tool.execute.before"]({ tool: "bash", sessionID: SID, callID: "call_1" }, { args: {} });
    advance(1_000);
    await runTool(hooks, history, 1);
    const asked = bodies.length;
    assert.equal(bodies[asked - 1].idle_seconds, 1);
    advance(3_600_000);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
    assert.equal(bodies.length, asked + 1, "a fresh /decide after the pause");
    assert.equal(bodies[bodies.length - 1].idle_seconds, 3601);
  });
});

test("a service that is down means every output is shown, and nothing throws", async () => {
  const hooks = await DtocContextPlugin({}, { url: "http://127.0.0.1:9", timeoutMs: 500, backoffMs: 0 });
  const state = hooks[STATE];
  const history = [user("task")];
  for (let i = 0; i < 4; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  assert.deepEqual(toolOutputs(history), OUTPUTS);
  assert.ok(state.stats.failures >= 4);
  assert.ok(state.sessions.get(SID).degraded);
});

test("every request carries the service's token; without it the service refuses and everything is shown", async () => {
  const { bodies, headers, statuses, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const history = [user("task")];
  for (let i = 0; i < 3; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  assert.ok(bodies.length >= 3);
  assert.ok(headers.every((h) => h.authorization === `Bearer ${TOKEN}`), JSON.stringify(headers));
  assert.ok(statuses.every((c) => c === 200));

  /** @type {string[]} */
  const logs = [];
  const anonymous = await DtocContextPlugin({}, { url, token: "", backoffMs: 0, log: (_l, m) => logs.push(m) });
  const h2 = [user("task")];
  for (let i = 0; i < 3; i++) await runTool(anonymous, h2, i);
  await anonymous["experimental.chat.messages.transform"]({}, { messages: h2 });
  assert.deepEqual(toolOutputs(h2), OUTPUTS.slice(0, 3));
  assert.ok(logs.some((m) => m.includes("HTTP 401")), logs.join("\n"));
});

/**
 * `n` calls of a session whose messages name a model the service cannot place; the history.
 * @param {any} hooks @param {number} n
 */
async function unknownModelCalls(hooks, n) {
  const history = [user("task")];
  for (let i = 0; i < n; i++) {
    await runTool(hooks, history, i);
    history[history.length - 1].info.modelID = "my-local-finetune-q4";
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  return history;
}

test("DTOC_MODEL overrides the messages' model, and the family the service resolved is logged once", async () => {
  process.env.DTOC_MODEL = "gpt-4o";
  /** @type {Array<[string, string]>} */
  const logs = [];
  const { bodies, spy } = recordingFetch();
  let hooks;
  try {
    hooks = await DtocContextPlugin({}, { url, fetch: spy, log: (l, m) => logs.push([l, m]) });
  } finally {
    delete process.env.DTOC_MODEL;
  }
  const history = await unknownModelCalls(hooks, 4);
  assert.ok(bodies.every((b) => b.model === "gpt-4o"));
  // the policy serves gpt-4o: it hid the old outputs (an unknown family would get the fallback: nothing hidden)
  assert.deepEqual(toolOutputs(history).map(hiddenKey), ["t0000", "t0001", null, null]);
  const said = logs.filter(([, m]) => m.includes("resolved to family"));
  assert.equal(said.length, 1, JSON.stringify(logs));
  assert.deepEqual(said[0][0], "info");
  assert.match(said[0][1], /"gpt-4o" resolved to family "gpt-4o"/);

  // without the override, the unknown name is served by this rule, which reads no prices ...
  /** @type {Array<[string, string]>} */
  const logs2 = [];
  await unknownModelCalls(await DtocContextPlugin({}, { url, log: (l, m) => logs2.push([l, m]) }), 3);
  const served = logs2.filter(([, m]) => m.includes("resolved to family"));
  assert.equal(served.length, 1);
  assert.deepEqual(served[0], ["info", 'dtoc: model "my-local-finetune-q4" resolved to family "other" (policy last_n(n=2,polling=1))']);

  // ... and where a policy that prices its decisions leaves it to the fallback, the log says how to fix it
  /** @type {Array<[string, string]>} */
  const logs3 = [];
  /** @type {typeof fetch} */
  const fellBack = async (input, init) => {
    const res = await fetch(input, init);
    const data = { ...(await res.json()), family: "other", fallback: true, policy: "none" };
    return new Response(JSON.stringify(data), { status: res.status, headers: res.headers });
  };
  await unknownModelCalls(await DtocContextPlugin({}, { url, fetch: fellBack, log: (l, m) => logs3.push([l, m]) }), 3);
  const warned = logs3.filter(([, m]) => m.includes("resolved to family"));
  assert.equal(warned.length, 1);
  assert.equal(warned[0][0], "warn");
  assert.match(warned[0][1], /DTOC_MODEL/);
});

test("a placeholder is ~40 tokens under ceil(chars/4), as the README says, and is counted at that size", async () => {
  const { bodies, spy } = recordingFetch();
  const hooks = await DtocContextPlugin({}, { url, fetch: spy });
  const history = [user("task")];
  for (let i = 0; i < 4; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  const placeholders = toolOutputs(history).filter((o) => hiddenKey(o));
  assert.equal(placeholders.length, 2);
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const stated = Number((readme.match(/~(\d+)-token JSON placeholder/) || [])[1]);
  for (const ph of placeholders) {
    const measured = Math.ceil(ph.length / 4);
    assert.ok(Math.abs(measured - stated) <= 2, `placeholder measures ${measured} tokens, README says ~${stated}`);
  }
  // extremes: a 5-digit key and a huge output stay within the stated size too
  const worst = JSON.stringify({ tool_key: "t99999", hidden: true, timestamp: "2026-12-01T00:00:00Z", estimated_tokens: 123456789, note: JSON.parse(placeholders[0]).note });
  assert.ok(Math.ceil(worst.length / 4) <= stated + 4);
  // the active tokens the plugin reports count hidden outputs at their placeholder's size
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  const last = bodies[bodies.length - 1];
  // each item carries the start of its output, where a learned policy reads its words
  for (const it of last.items) assert.ok(it.head.length > 0 && OUTPUTS.some((o) => o.startsWith(it.head)));
  const s = hooks[STATE].sessions.get(SID);
  const visible = last.items.filter((/** @type {any} */ it) => it.visible).reduce((a, /** @type {any} */ it) => a + it.tokens, 0);
  const hidden = placeholders.reduce((a, ph) => a + Math.ceil(ph.length / 4), 0);
  assert.equal(last.active_tokens, visible + hidden + s.otherTokens);
});

test("a hung service (accepts, never answers) costs one timeout, then ever longer pauses (capped)", async () => {
  /** @type {import("node:net").Socket[]} */
  const sockets = [];
  const hung = createServer((sock) => sockets.push(sock)); // accepts, reads nothing, answers nothing
  await new Promise((r) => hung.listen(0, "127.0.0.1", () => r(undefined)));
  const port = /** @type {import("node:net").AddressInfo} */ (hung.address()).port;
  /** @type {number[]} */
  const starts = [];
  /** @type {number[]} */
  const ends = [];
  /** @type {typeof fetch} */
  const timed = async (input, init) => {
    starts.push(Date.now());
    try {
      return await fetch(input, init);
    } finally {
      ends.push(Date.now());
    }
  };
  const timeoutMs = 100;
  const hooks = await DtocContextPlugin({}, { url: `http://127.0.0.1:${port}`, fetch: timed, timeoutMs, backoffMs: 100, maxBackoffMs: 800 });
  const history = [user("task")];
  await runTool(hooks, history, 0);
  /** @type {Array<{ ms: number, asked: boolean }>} */
  const calls = [];
  const t0 = Date.now();
  try {
    while (Date.now() - t0 < 4000 && calls.length < 400) {
      // a model call every 10 ms: a busy agent
      const c0 = Date.now();
      const before = starts.length;
      await hooks["experimental.chat.messages.transform"]({}, { messages: history });
      calls.push({ ms: Date.now() - c0, asked: starts.length > before });
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    for (const sock of sockets) sock.destroy();
    hung.close();
  }
  assert.deepEqual(toolOutputs(history), [OUTPUTS[0]], "everything shown");
  // the pause after each timeout, until the next request: 100, 200, 400, 800, 800, ... ms
  const pauses = starts.slice(1).map((t, i) => t - ends[i]);
  const planned = pauses.map((_, i) => Math.min(800, 100 * 2 ** i));
  assert.ok(pauses.length >= 4 && pauses.length <= 9, `requests: ${starts.length}, pauses ${pauses}`);
  pauses.forEach((p, i) => assert.ok(p >= planned[i] - 5 && p <= planned[i] + 250, `pauses ${pauses}, planned ${planned}`));
  // a model call waits for one timeout when it asks, and not at all in a pause
  const asked = calls.filter((c) => c.asked);
  assert.equal(asked.length, starts.length);
  assert.ok(asked.every((c) => c.ms < timeoutMs + 250), JSON.stringify(asked));
  assert.ok(calls.filter((c) => !c.asked).every((c) => c.ms < 50), "no waiting during a pause");
  assert.ok(calls.length > 4 * starts.length, `${calls.length} model calls, ${starts.length} requests`);
  assert.equal(hooks[STATE].stats.failures, starts.length);
});

test("when the service goes away mid-session, hidden outputs are restored", async () => {
  const hooks = await DtocContextPlugin({}, { url, backoffMs: 0, timeoutMs: 1000 });
  const history = [user("task")];
  for (let i = 0; i < 4; i++) {
    await runTool(hooks, history, i);
    await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  }
  assert.deepEqual(toolOutputs(history).map(hiddenKey), ["t0000", "t0001", null, null]);
  // stop the real service
  const exited = new Promise((r) => proc?.once("exit", r));
  proc?.kill("SIGTERM");
  await exited;
  await hooks["experimental.chat.messages.transform"]({}, { messages: history });
  assert.deepEqual(toolOutputs(history), OUTPUTS, "fallback: show everything, originals back");
  assert.ok(hooks[STATE].sessions.get(SID).degraded);
});
