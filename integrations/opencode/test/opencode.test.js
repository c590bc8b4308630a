// The plugin inside the REAL OpenCode (the `opencode-ai` npm package), offline: a fake
// OpenAI-compatible model and `dtoc-rl serve` both on 127.0.0.1. The fake model runs four bash
// calls; the policy (last_n:n=1) hides all but the newest output, so later model requests must
// carry the plugin's placeholders in place of the older outputs.
//
// Skipped unless an `opencode` binary is found: OPENCODE_BIN, or this folder's node_modules
// (`npm install --no-save opencode-ai`; about 350 MB, so not a devDependency).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startService } from "./service.js";

const HERE = fileURLToPath(new URL(".", import.meta.url));
const BIN = process.env.OPENCODE_BIN || join(HERE, "..", "node_modules", ".bin", "opencode");
const PLUGIN = new URL("../dtoc.js", import.meta.url).href;
const CALLS = 4;

/** @type {Array<() => void>} */
const cleanup = [];
after(() => cleanup.forEach((f) => f()));

/**
 * A chat-completions endpoint that streams one bash call per request until CALLS tool results
 * are in the conversation, then a final answer; it records every request body.
 */
async function fakeModel() {
  /** @type {any[]} */
  const bodies = [];
  const server = createServer((req, res) => {
    let raw = "";
    req.on("data", (d) => (raw += d));
    req.on("end", () => {
      /** @type {any} */
      let body = {};
      try {
        body = JSON.parse(raw || "{}");
      } catch {
        /* recorded as empty */
      }
      bodies.push(body);
      const done = (body.messages || []).filter((/** @type {any} */ m) => m.role === "tool").length;
      const withTools = Array.isArray(body.tools) && body.tools.length > 0;
      /** @param {any} delta @param {string | null} finish */
      const chunk = (delta, finish) =>
        `data: ${JSON.stringify({ id: `c${bodies.length}`, object: "chat.completion.chunk", created: 0, model: "fake", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (withTools && done < CALLS) {
        const args = JSON.stringify({ command: `seq ${done * 1000} ${done * 1000 + 400}`, description: "print numbers" });
        res.write(chunk({ role: "assistant", content: `step ${done}` }, null));
        res.write(chunk({ tool_calls: [{ index: 0, id: `call_${done}`, type: "function", function: { name: "bash", arguments: args } }] }, null));
        res.write(chunk({}, "tool_calls"));
      } else {
        res.write(chunk({ role: "assistant", content: withTools ? "done" : "A title" }, null)); // (a title request has no tools)
        res.write(chunk({}, "stop"));
      }
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", () => r(undefined)));
  cleanup.push(() => server.close());
  return { bodies, port: /** @type {import("node:net").AddressInfo} */ (server.address()).port };
}

test("inside the real opencode, the model receives the plugin's placeholders", { skip: !existsSync(BIN) && `no opencode binary (${BIN})`, timeout: 240_000 }, async () => {
  const token = "oc-test-" + Math.random().toString(36).slice(2);
  const svc = await startService({ policy: "last_n:n=1", token });
  cleanup.push(() => svc.proc.kill("SIGTERM"));
  const model = await fakeModel();
  const dir = mkdtempSync(join(tmpdir(), "dtoc-opencode-"));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const home = join(dir, "home");
  const work = join(dir, "work");
  mkdirSync(home);
  mkdirSync(work);
  const config = join(work, "opencode.json");
  writeFileSync(config, JSON.stringify({
    plugin: [PLUGIN],
    provider: { fake: { npm: "@ai-sdk/openai-compatible", name: "Fake", options: { baseURL: `http://127.0.0.1:${model.port}/v1`, apiKey: "x" }, models: { "fake-model": { name: "Fake", tool_call: true } } } },
    model: "fake/fake-model",
    small_model: "fake/fake-model",
    permission: { bash: "allow" },
    autoupdate: false,
    share: "disabled",
  }));
  // a private HOME, and nothing that would reach the network (model lists, updates, default plugins)
  const env = {
    PATH: process.env.PATH || "",
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_CACHE_HOME: join(home, ".cache"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    OPENCODE_CONFIG: config,
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    OPENCODE_DISABLE_SHARE: "1",
    OPENCODE_DISABLE_CLAUDE_CODE: "1",
    DTOC_URL: svc.url,
    DTOC_TOKEN: token,
    DTOC_MODEL: "gpt-4o", // "fake-model" is no family the policy serves
  };
  const proc = spawn(BIN, ["run", "--print-logs", "--model", "fake/fake-model", "Print some numbers"], { cwd: work, env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.on("data", (d) => (err += d));
  const killer = setTimeout(() => proc.kill("SIGKILL"), 180_000);
  const code = await new Promise((r) => proc.once("exit", r));
  clearTimeout(killer);
  assert.equal(code, 0, `opencode failed:\n${out.slice(-2000)}\n${err.slice(-4000)}`);

  const turns = model.bodies.filter((b) => Array.isArray(b.tools) && b.tools.length);
  assert.equal(turns.length, CALLS + 1, "one model call per bash call, then the answer");
  /** @param {any} b */
  const toolTexts = (b) => (b.messages || []).filter((/** @type {any} */ m) => m.role === "tool").map((/** @type {any} */ m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
  /** @param {string} t */
  const hiddenKey = (t) => {
    try {
      const o = JSON.parse(t);
      return o && o.hidden === true ? o.tool_key : null;
    } catch {
      return null;
    }
  };
  const last = toolTexts(turns[turns.length - 1]);
  assert.equal(last.length, CALLS);
  // every output but the newest is a placeholder (last_n:n=1), the newest is the tool's text
  assert.deepEqual(last.map(hiddenKey), ["t0000", "t0001", "t0002", null]);
  assert.match(last[CALLS - 1], /^3000\n3001\n/);
  assert.ok(last.slice(0, -1).every((t) => Math.ceil(t.length / 4) <= 45), "placeholders are short");
  // the first call that had a tool output saw it in full: nothing is hidden before the policy says so
  assert.match(toolTexts(turns[1])[0], /^0\n1\n2\n/);
  assert.match(err, /dtoc: model \\?"gpt-4o\\?" resolved to family \\?"gpt-4o\\?"/); // (quotes escaped in the log)
});
