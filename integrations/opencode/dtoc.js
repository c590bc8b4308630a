// @ts-check
/**
 * DTOC for OpenCode: a learned (or rule) policy decides which past tool outputs the model sees.
 *
 * Every completed tool output is kept in full by this plugin under a short DTOC key
 * (t0000, t0001, ...). Before each model call, `experimental.chat.messages.transform`
 * sends the outputs' metadata (key, tokens, visibility; with tool, inputs and age for the
 * most recent, as many as the service's policy sees) to a running `dtoc-rl serve` and
 * applies its answer: hidden outputs are replaced by a short JSON
 * placeholder, and outputs the policy enables again get their original text back.
 * `tool.execute.after` registers each new output (and prefetches the next decision when
 * labels are off). Each model call's text and tool outputs go to the service once, as a
 * session turn, so that it labels the needs a learned policy reads (DTOC_LABELS=0: off).
 * When the service is down or slow, everything is shown as it was (nothing is lost).
 *
 * Setup: run `dtoc-rl serve --policy CKPT_OR_SPEC` and add this file to opencode.json
 * (`"plugin": ["file:///abs/path/to/dtoc.js"]`) or copy it into `.opencode/plugin/`.
 * Settings (environment): DTOC_URL (default http://127.0.0.1:8765), DTOC_TOKEN (the service's
 * token, sent as a bearer token), DTOC_TIMEOUT_MS (default 1500), DTOC_MODEL (model name sent
 * to the service, over the session's own: for a local model whose name the service does not
 * know), DTOC_BUDGET (token budget, default 0), DTOC_LABELS=0 (send no texts: no need
 * features), DTOC_DISABLE=1 (plugin off).
 *
 * The module exports only the plugin factory: OpenCode calls every export as a plugin.
 * Plain ESM JavaScript with JSDoc types (checked with `tsc -p .`), so it runs unbuilt
 * under Bun (OpenCode) and Node 20 (tests).
 */

/**
 * @typedef {object} DtocOptions
 * @property {string} [url] service base URL
 * @property {number} [timeoutMs] per-request timeout
 * @property {number} [backoffMs] after a failure, skip the service this long (show everything);
 *   doubled after each further failure in a row, up to maxBackoffMs
 * @property {number} [maxBackoffMs] the longest backoff (a service that came back is used again by then)
 * @property {string} [token] sent as `Authorization: Bearer <token>` (default: DTOC_TOKEN)
 * @property {string} [model] model name sent to the service, over the messages' own (DTOC_MODEL)
 * @property {number} [budget] token budget passed to the policy
 * @property {boolean} [disabled] do nothing
 * @property {boolean} [labels] send each turn's text once so that the service labels needs (default on)
 * @property {typeof fetch} [fetch] fetch implementation (tests)
 * @property {(level: "info" | "warn" | "error", message: string) => void} [log]
 */

/**
 * @typedef {object} Item
 * @property {string} key DTOC key (t0000)
 * @property {string} callID OpenCode tool call id
 * @property {string} tool
 * @property {string} args JSON text of the call's input
 * @property {number} tokens estimated tokens of the original output
 * @property {string} original the output as the tool produced it
 * @property {boolean} visible
 * @property {number} assistantIndex index of the assistant message that made the call
 * @property {number} timestamp ms since the epoch
 * @property {boolean} superseded a later call re-ran the same tool with the same input
 * @property {boolean} seenInHistory it has been in a transformed message list
 */

/**
 * @typedef {object} Decision
 * @property {string[]} enable
 * @property {string[]} disable
 * @property {string} [policy]
 * @property {boolean} [fallback]
 */

/**
 * @typedef {object} Session
 * @property {Map<string, Item>} items by callID
 * @property {Map<string, Item>} byKey
 * @property {number} next next key number
 * @property {number} assistants assistant messages seen at the last transform
 * @property {number} otherTokens tokens of the non-tool text at the last transform
 * @property {string} model
 * @property {{ sig: string, at: number, promise: Promise<Decision | null | symbol> } | null} prefetch (no turns:
 *   never RETRY); `at` is when it was asked: its idle_seconds is only true for a call that follows soon
 * @property {boolean} degraded the last decision fell back to showing everything
 * @property {number} decisions
 * @property {number} sentTurns assistant messages the service has as turns
 * @property {string[]} sentIds their message ids (a revert that replaced one starts a new service session)
 * @property {boolean} labelsOff the service refused this session's texts (too large): metadata only
 * @property {"all" | "none"} retry how to ask again after a refused request: every turn anew, or no texts
 * @property {Map<string, Item>} compacted outputs OpenCode pruned itself, by callID (still sent as turns)
 * @property {number} generation bumped when the service's copy of the session is lost or stale
 * @property {Record<string, number>} needed the service's need counts by key (last answer)
 * @property {number} responseAt ms since the epoch when the model's last response ended (its first tool
 *   started), 0 when not seen: the wait since then tells the service whether the provider's prompt cache
 *   has expired, when a change costs no re-write
 * @property {boolean} toolsStarted a tool of the latest response has started (responseAt is set)
 */

/**
 * @typedef {{ info: { role?: string, sessionID?: string, modelID?: string, model?: { modelID?: string, providerID?: string } } & Record<string, any>, parts: Array<Record<string, any>> }} MessageWithParts
 */

const DEFAULT_URL = "http://127.0.0.1:8765";
/** a prefetched decision older than this is asked again (its idle_seconds would be stale) */
const PREFETCH_FRESH_MS = 5000;
const RETRY = Symbol("retry"); // the session's labels must be sent anew (or not at all): ask again
const STATE = Symbol.for("dtoc.state");
// Kept short: a placeholder is about 40 tokens under ceil(chars/4), the estimator the plugin and
// the service's default use (the core's own placeholders measure the same); a test holds it there.
const NOTE = "kept in full; shown again when needed or re-run";
// Texts sent for labelling are cut (head and tail) beyond this: the body limit is 1 MiB.
const MAX_SENT_CHARS = 50_000;
const MAX_BODY_BYTES = 900_000; // under the service's default 1 MiB body limit
const MAX_TURNS_BYTES = 600_000; // turns per request at most (the rest follow with the next calls)
const MIN_TURNS_BYTES = 50_000;
// The service's policy sees its `max_items` most recent items and never changes older ones, so only
// those carry their texts; older ones carry what the service's session keeps of each (key, size,
// visibility: a timeout shows them all, a session sent anew starts from the plugin's own).  Until an
// answer names the service's own, its default is assumed.
const DEFAULT_WINDOW = 128;

/** @param {string} text @param {number} [limit] characters */
function clip(text, limit = MAX_SENT_CHARS) {
  if (!text || text.length <= limit) return text || "";
  const half = Math.max(1, Math.floor(limit / 2));
  return text.slice(0, half) + "\n[...]\n" + text.slice(text.length - half);
}

const encoder = new TextEncoder();

/** @param {unknown} value */
function jsonBytes(value) {
  return encoder.encode(JSON.stringify(value)).length;
}

/**
 * A turn with every text cut to `limit` characters (head and tail).
 * @param {{ index: number, assistant_text: string, user_text: string, calls: any[] }} t @param {number} limit
 */
function clipTurn(t, limit) {
  return {
    index: t.index,
    assistant_text: clip(t.assistant_text, limit),
    user_text: clip(t.user_text, limit),
    calls: t.calls.map((c) => ({ ...c, args: clip(c.args, limit), output: clip(c.output, limit) })),
  };
}

/**
 * The first turns, clipped, as many as fit in `room` bytes of JSON (at most MAX_TURNS_BYTES;
 * at least one turn: one too large on its own is cut further until it fits); the others go
 * with the next calls.
 * @param {Array<{ index: number, assistant_text: string, user_text: string, calls: any[] }>} pending
 * @param {number} [room]
 */
function fitTurns(pending, room = MAX_TURNS_BYTES) {
  const budget = Math.min(room, MAX_TURNS_BYTES);
  const out = [];
  let size = 0;
  for (const t of pending) {
    let c = clipTurn(t, MAX_SENT_CHARS);
    let bytes = jsonBytes(c);
    for (let limit = MAX_SENT_CHARS; bytes > budget && limit > 64; ) {
      limit = Math.floor((limit * budget) / bytes / 1.25);
      c = clipTurn(t, limit);
      bytes = jsonBytes(c);
    }
    if (out.length && size + bytes > budget) break;
    out.push(c);
    size += bytes;
  }
  return out;
}

/** @param {string} text */
function estimateTokens(text) {
  return Math.ceil((text || "").length / 4);
}

/** @param {number} n */
function formatKey(n) {
  return "t" + String(n).padStart(4, "0");
}

/** @param {Item} item */
function placeholder(item) {
  return JSON.stringify({
    tool_key: item.key,
    hidden: true,
    timestamp: new Date(item.timestamp).toISOString().replace(/\.\d{3}Z$/, "Z"),
    estimated_tokens: item.tokens,
    note: NOTE,
  });
}

/** @param {unknown} args */
function argsText(args) {
  if (typeof args === "string") return args;
  try {
    return JSON.stringify(args ?? {});
  } catch {
    return "{}";
  }
}

/**
 * The plugin's hooks and state, with options (tests) or environment settings.
 * @param {DtocOptions} [opts]
 */
function createDtoc(opts = {}) {
  const env = typeof process !== "undefined" && process.env ? process.env : {};
  const url = (opts.url || env.DTOC_URL || DEFAULT_URL).replace(/\/+$/, "");
  const timeoutMs = opts.timeoutMs ?? (Number(env.DTOC_TIMEOUT_MS) || 1500);
  const backoffMs = opts.backoffMs ?? 1000;
  const maxBackoffMs = Math.max(backoffMs, opts.maxBackoffMs ?? 60_000);
  const token = opts.token ?? env.DTOC_TOKEN ?? "";
  /** @type {Record<string, string>} */
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  /** @type {Set<string>} model names whose family has been logged */
  const resolved = new Set();
  const budget = opts.budget ?? (Number(env.DTOC_BUDGET) || 0);
  const fixedModel = opts.model || env.DTOC_MODEL || "";
  const disabled = opts.disabled ?? env.DTOC_DISABLE === "1";
  const sendTurns = opts.labels ?? env.DTOC_LABELS !== "0";
  const instance = Math.random().toString(36).slice(2, 10);
  const doFetch = opts.fetch || globalThis.fetch;
  const log = opts.log || (() => {});
  /** @type {Map<string, Session>} */
  const sessions = new Map();
  // failuresInRow: consecutive failed requests; each one doubles the next backoff (a hung
  // service then costs one timeout per ever longer pause, not one per model call)
  const stats = { requests: 0, failures: 0, fallbacks: 0, downUntil: 0, failuresInRow: 0 };
  let serviceWindow = DEFAULT_WINDOW; // items per request: the service's max_items, once an answer names it

  /** @param {string} id @returns {Session} */
  function session(id) {
    let s = sessions.get(id);
    if (!s) {
      s = {
        items: new Map(),
        byKey: new Map(),
        next: 0,
        assistants: 0,
        otherTokens: 0,
        model: "",
        prefetch: null,
        degraded: false,
        decisions: 0,
        sentTurns: 0,
        sentIds: [],
        labelsOff: false,
        retry: "none",
        compacted: new Map(),
        generation: 0,
        needed: {},
        responseAt: 0,
        toolsStarted: false,
      };
      sessions.set(id, s);
    }
    return s;
  }

  /**
   * @param {Session} s @param {string} callID @param {string} tool @param {unknown} args
   * @param {string} output @param {number} assistantIndex @param {number} [timestamp]
   */
  function register(s, callID, tool, args, output, assistantIndex, timestamp) {
    const a = argsText(args);
    for (const other of s.items.values()) {
      if (other.tool === tool && other.args === a) other.superseded = true;
    }
    /** @type {Item} */
    const item = {
      key: formatKey(s.next++),
      callID,
      tool,
      args: a,
      tokens: estimateTokens(output),
      original: output,
      visible: true,
      assistantIndex,
      timestamp: timestamp ?? Date.now(),
      superseded: false,
      seenInHistory: false,
    };
    s.items.set(callID, item);
    s.byKey.set(item.key, item);
    return item;
  }

  /** @param {Session} s @param {number} step @param {number} otherTokens */
  function payload(s, step, otherTokens) {
    const items = [...s.items.values()].sort((a, b) => a.assistantIndex - b.assistantIndex || a.key.localeCompare(b.key));
    let active = otherTokens;
    for (const it of items) active += it.visible ? it.tokens : estimateTokens(placeholder(it));
    const first = Math.max(0, items.length - serviceWindow);
    const older = items.slice(0, first).map((it) => ({ key: it.key, tokens: it.tokens, visible: it.visible }));
    return {
      model: fixedModel || s.model || "",
      step,
      budget,
      active_tokens: active,
      // unknown (no tool timed yet) is left out: the service then assumes a warm cache
      ...(s.responseAt ? { idle_seconds: Math.max(0, (Date.now() - s.responseAt) / 1000) } : {}),
      items: [...older, ...recentItems(items.slice(first), step, jsonBytes(older))],
    };
  }

  /**
   * The items the policy sees, as sent: their texts cut until, with `taken` bytes of older items, they
   * leave the turns room in the body.
   * @param {Item[]} items @param {number} step @param {number} taken
   */
  function recentItems(items, step, taken) {
    /** @param {number} limit */
    const build = (limit) =>
      items.map((it) => ({
        key: it.key,
        tokens: it.tokens,
        visible: it.visible,
        tool: it.tool,
        args: it.args.length > limit ? it.args.slice(0, limit) : it.args,
        // the start of the output: with the call, the words a learned policy reads (the service reads
        // at most 300 characters of its first lines)
        head: it.original.slice(0, Math.min(600, limit)),
        age: Math.max(0, step - 1 - it.assistantIndex),
        superseded: it.superseded,
      }));
    let limit = 20_000;
    let out = build(limit);
    while (limit > 300 && taken + jsonBytes(out) > MAX_BODY_BYTES - 2 * MIN_TURNS_BYTES) {
      limit = Math.floor(limit / 4);
      out = build(limit);
    }
    return out;
  }

  /** @param {Session} s */
  function resync(s) {
    s.generation++;
    s.sentTurns = 0;
    s.sentIds = [];
  }

  /**
   * @param {Record<string, any>} body @param {Session} [s]
   * @returns {Promise<Decision | null | typeof RETRY>}
   */
  async function decide(body, s) {
    if (Date.now() < stats.downUntil) return null;
    stats.requests++;
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), timeoutMs);
    try {
      const res = await doFetch(url + "/decide", {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: ctrl.signal,
      });
      const data = await res.json();
      if (s && body.turns && (res.status === 409 || res.status === 413)) {
        const field = String((data && data.field) || "");
        if (res.status === 409) {
          resync(s); // the service lost this session (it restarted): send every turn anew
          s.retry = "all";
        } else if (field.startsWith("turns")) {
          s.labelsOff = true; // the session's texts are over the service's limit: metadata only
          s.retry = "none";
          log("warn", `dtoc: the service refused this session's texts (${data && data.error}); no need labels`);
        } else {
          s.retry = "none"; // this request was too large as a whole: without texts this time
        }
        return RETRY;
      }
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${data && data.error}`);
      if (s && data.session) {
        s.sentTurns = data.session.turns;
        s.needed = data.session.needed || {};
      }
      if (!Array.isArray(data.enable) || !Array.isArray(data.disable)) throw new Error("malformed answer");
      if (Number.isInteger(data.max_items) && data.max_items > 0) serviceWindow = data.max_items;
      stats.failuresInRow = 0;
      if (typeof data.family === "string" && !resolved.has(String(body.model))) {
        resolved.add(String(body.model));
        const how = data.fallback
          ? `not served by the policy: the fallback (${data.policy}) decides; set DTOC_MODEL to a known model name`
          : `policy ${data.policy}`;
        log(data.fallback ? "warn" : "info", `dtoc: model "${body.model}" resolved to family "${data.family}" (${how})`);
      }
      return data;
    } catch (e) {
      stats.failures++;
      stats.failuresInRow++;
      const pause = Math.min(maxBackoffMs, backoffMs * 2 ** Math.min(30, stats.failuresInRow - 1));
      stats.downUntil = Date.now() + pause;
      const why = e instanceof Error ? (e.name === "AbortError" ? `no answer in ${timeoutMs} ms` : e.message) : e;
      log("warn", `dtoc: service at ${url} unavailable (${why}); showing every output, next try in ${pause} ms`);
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /** @param {Session} s @param {Decision | null} d */
  function apply(s, d) {
    s.decisions++;
    if (!d) {
      stats.fallbacks++;
      s.degraded = true;
      for (const it of s.items.values()) it.visible = true;
      return;
    }
    s.degraded = false;
    for (const k of d.enable) {
      const it = s.byKey.get(k);
      if (it) it.visible = true;
    }
    for (const k of d.disable) {
      const it = s.byKey.get(k);
      if (it) it.visible = false;
    }
  }

  /** @param {MessageWithParts[]} messages */
  function sessionOf(messages) {
    for (const m of messages) if (m && m.info && typeof m.info.sessionID === "string") return m.info.sessionID;
    for (const m of messages)
      for (const p of (m && m.parts) || []) if (p && typeof p.sessionID === "string") return p.sessionID;
    return null;
  }

  const hooks = {
    /**
     * The first tool of a response starts when the model's response has ended: from then on the
     * provider's prompt cache waits, and past its lifetime a change costs no re-write.
     * @param {{ tool: string, sessionID: string, callID: string }} input
     */
    "tool.execute.before": async (input) => {
      if (disabled || !input || typeof input.sessionID !== "string") return;
      const s = session(input.sessionID);
      if (!s.toolsStarted) {
        s.responseAt = Date.now();
        s.toolsStarted = true;
      }
    },

    /**
     * @param {{ tool: string, sessionID: string, callID: string, args?: unknown }} input
     * @param {{ title: string, output: string, metadata: unknown }} output
     */
    "tool.execute.after": async (input, output) => {
      if (disabled || !input || !output || typeof output.output !== "string") return;
      const s = session(input.sessionID);
      const known = s.items.get(input.callID);
      if (known) {
        known.original = output.output;
        known.tokens = estimateTokens(output.output);
      } else {
        register(s, input.callID, input.tool, input.args, output.output, s.assistants);
      }
      // Prefetch the decision the next model call will most likely ask for (without labels:
      // the next call's turn, with its text, is only known to the transform).
      if (sendTurns) return;
      const body = payload(s, s.assistants + 1, s.otherTokens);
      const sig = JSON.stringify(body.items) + "|" + body.step;
      s.prefetch = { sig, at: Date.now(), promise: decide(body) };
    },

    /**
     * @param {{}} _input
     * @param {{ messages: MessageWithParts[] }} output
     */
    "experimental.chat.messages.transform": async (_input, output) => {
      if (disabled || !output || !Array.isArray(output.messages)) return;
      const messages = output.messages;
      const id = sessionOf(messages);
      if (!id) return;
      const s = session(id);
      /** @type {Array<{ part: Record<string, any>, item: Item }>} */
      const managed = [];
      let assistants = 0;
      let otherChars = 0;
      /** @type {Array<{ index: number, assistant_text: string, user_text: string, calls: any[] }>} */
      const turns = [];
      let task = "";
      /** @type {string[]} */
      let userTexts = [];
      /** @type {string[]} */
      const turnIds = [];
      for (const m of messages) {
        const info = (m && m.info) || {};
        const isAssistant = info.role === "assistant";
        if (isAssistant) {
          assistants++;
          if (typeof info.modelID === "string" && info.modelID) s.model = info.modelID;
        } else if (info.model && typeof info.model.modelID === "string" && info.model.modelID && !s.model) {
          s.model = info.model.modelID;
        }
        const turn = isAssistant
          ? { index: assistants - 1, assistant_text: "", user_text: userTexts.join("\n\n"), calls: /** @type {any[]} */ ([]) }
          : null;
        if (turn) {
          userTexts = [];
          turns.push(turn);
          turnIds.push(typeof info.id === "string" ? info.id : `#${assistants - 1}`);
        }
        for (const part of (m && m.parts) || []) {
          if (!part) continue;
          if (part.type === "text" || part.type === "reasoning") otherChars += (part.text || "").length;
          if (part.type === "text" && typeof part.text === "string") {
            // the user's words and what OpenCode attaches (synthetic parts: files, notes) are in
            // context whatever happens to the outputs: the labeller excludes them as own words
            if (turn) {
              if (!part.synthetic) turn.assistant_text += (turn.assistant_text ? "\n" : "") + part.text;
            } else if (info.role === "user" && !assistants) task += (task ? "\n" : "") + part.text;
            else if (info.role === "user") userTexts.push(part.text);
          }
          if (part.type !== "tool" || !part.state) continue;
          const st = part.state;
          if (st.status === "error" && turn) {
            // a failed call is an action too (a refused edit shows what the agent relied on)
            const err = typeof st.error === "string" ? st.error : JSON.stringify(st.error ?? "");
            turn.calls.push({ key: "err:" + part.callID, tool: part.tool || "tool", args: argsText(st.input), output: err, is_error: true });
            continue;
          }
          if (st.status !== "completed") continue;
          if (st.time && st.time.compacted) {
            // OpenCode already pruned it; what it was is still what the agent read
            const known = s.items.get(part.callID) || s.compacted.get(part.callID);
            if (known) s.compacted.set(part.callID, known); // kept for resending its turn
            if (known && turn) turn.calls.push({ key: known.key, tool: known.tool, args: known.args, output: known.original });
            continue;
          }
          if (typeof st.output !== "string") continue;
          const index = isAssistant ? assistants - 1 : Math.max(0, assistants - 1);
          let item = s.items.get(part.callID);
          if (!item) {
            const start = part.state.time && part.state.time.start;
            item = register(s, part.callID, part.tool, part.state.input, part.state.output, index, start);
          }
          item.assistantIndex = index;
          item.seenInHistory = true;
          managed.push({ part, item });
          if (turn) turn.calls.push({ key: item.key, tool: item.tool, args: item.args, output: item.original });
        }
      }
      s.assistants = assistants;
      s.otherTokens = Math.ceil(otherChars / 4);
      // Outputs no longer in the history (a revert, or OpenCode's own compaction) leave the store.
      const seen = new Set(managed.map((x) => x.item.callID));
      for (const [callID, it] of s.items) {
        if (!seen.has(callID) && (it.seenInHistory || it.assistantIndex < assistants)) {
          s.items.delete(callID);
          s.byKey.delete(it.key);
        }
      }
      // A model call follows this transform. Its response's first tool times the next wait; a response
      // with no tool leaves the time of this call, the request that refreshed the cache (whose lifetime
      // counts from it).
      s.toolsStarted = false;
      const callAt = Date.now();
      if (!managed.length) {
        s.responseAt = callAt;
        return;
      }
      /** @type {Record<string, any>} */
      const body = payload(s, assistants, s.otherTokens);
      s.responseAt = callAt;
      const sig = JSON.stringify(body.items) + "|" + body.step;
      const pre = s.prefetch;
      s.prefetch = null;
      const labelled = sendTurns && !s.labelsOff;
      /** @param {Record<string, any>} b */
      const withTurns = (b) => {
        // a revert replaced or removed turns the service has: its copy is stale
        if (s.sentIds.some((mid, i) => turnIds[i] !== mid)) resync(s);
        // the session names this plugin instance: a restarted OpenCode numbers its outputs anew
        /** @type {Record<string, any>} */
        const out = { ...b, session: `${instance}:${id}#${s.generation}` };
        if (s.sentTurns === 0) out.task = clip(task);
        // the user's words since the last answer: the call about to be made is sent them, so the
        // outputs before them are a user turn older now, not only once the next turn brings them
        if (userTexts.length) out.pending_user_text = clip(userTexts.join("\n\n"));
        // the turns get what the body limit leaves after the rest
        const room = Math.max(MIN_TURNS_BYTES, MAX_BODY_BYTES - jsonBytes(out));
        out.turns = fitTurns(turns.slice(s.sentTurns), room);
        return out;
      };
      // a prefetched answer is reused only for a call that followed soon: after a pause (a permission
      // prompt, a user away) the cache may have expired, which the prefetch's idle_seconds did not know
      const fresh = pre && pre.sig === sig && !labelled && Date.now() - pre.at <= PREFETCH_FRESH_MS;
      let decision = fresh && pre ? await pre.promise : await decide(labelled ? withTurns(body) : body, s);
      if (decision === RETRY) {
        // once more: with every turn in a new service session, or without texts (withTurns
        // copies, so `body` is still the metadata alone)
        decision = await decide(s.retry === "all" && !s.labelsOff ? withTurns(body) : body, s);
      }
      if (typeof decision === "symbol") decision = null; // still refused: show everything this time
      if (labelled && decision && s.sentTurns) s.sentIds = turnIds.slice(0, s.sentTurns);
      apply(s, decision);
      for (const { part, item } of managed) {
        part.state.output = item.visible ? item.original : placeholder(item);
      }
    },

    /** @param {{ event: { type: string, properties?: any } }} input */
    event: async (input) => {
      const ev = input && input.event;
      if (ev && ev.type === "session.deleted") {
        const sid = ev.properties && ev.properties.info && ev.properties.info.id;
        if (typeof sid === "string") sessions.delete(sid);
      }
    },
  };
  return { hooks, sessions, stats, url };
}

/**
 * The OpenCode plugin. OpenCode calls it with its PluginInput; `options` (tests) override
 * the environment settings. The returned hooks carry the plugin state under the
 * `Symbol.for("dtoc.state")` key (not a hook: symbols are invisible to OpenCode).
 * @param {{ client?: any } & Record<string, any>} [input]
 * @param {DtocOptions} [options]
 */
export const DtocContextPlugin = async (input, options = {}) => {
  const client = input && input.client;
  const log =
    options.log ||
    ((/** @type {string} */ level, /** @type {string} */ message) => {
      try {
        const p = client && client.app && client.app.log && client.app.log({ body: { service: "dtoc", level, message } });
        if (p && typeof p.catch === "function") p.catch(() => {});
      } catch {
        /* logging must never break the agent */
      }
    });
  const dtoc = createDtoc({ ...options, log });
  return Object.assign(dtoc.hooks, { [STATE]: dtoc });
};
