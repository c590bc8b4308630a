// Test helpers: the REAL policy service, `dtoc-rl serve`, on 127.0.0.1 with a free port.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

/**
 * Start `dtoc-rl serve --policy <policy>` with DTOC_TOKEN=token; resolve once /health answers.
 * @param {{ policy: string, token: string, python?: string }} opts
 * @returns {Promise<{ url: string, proc: import("node:child_process").ChildProcess }>}
 */
export async function startService({ policy, token, python = process.env.DTOC_PYTHON || "python3" }) {
  const args = ["-c", "import sys; from dtoc_rl.cli import main; sys.exit(main())",
    "serve", "--policy", policy, "--host", "127.0.0.1", "--port", "0", "--json"];
  const proc = spawn(python, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, DTOC_TOKEN: token } });
  let stderr = "";
  proc.stderr?.on("data", (d) => (stderr += d));
  const rl = createInterface({ input: /** @type {any} */ (proc.stdout) });
  const line = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("service did not start in 90 s: " + stderr)), 90_000);
    rl.once("line", (l) => {
      clearTimeout(timer);
      resolve(l);
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code}: ${stderr}`));
    });
  });
  const info = JSON.parse(/** @type {string} */ (line));
  assert.equal(info.host, "127.0.0.1");
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(info.url + "/health");
      if (r.ok && (await r.json()).status === "ok") return { url: info.url, proc };
    } catch {
      /* not yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill("SIGTERM");
  throw new Error("service never became healthy");
}
