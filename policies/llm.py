"""PromptedLLMPolicy: ask an LLM, at each decision, for a ``manage_context`` call.

This is the DTOC paper's setting: a model sees the stored tool outputs (key,
token estimate, step, preview, visibility), the agent's recent reasoning and
the current active tokens, and answers with
``manage_context(enable=[...], disable=[...])``.  The policy maps the answer's
keys to slots and returns ``{"enable": int8[N], "disable": int8[N]}``.

What the policy reads
---------------------
From ``obs`` (:mod:`dtoc_rl.engine.features`): ``item_mask``, ``enable_mask``,
``disable_mask``, ``items``, ``item_tool``, ``globals``, ``family``.  From
``info`` (all optional, in order of preference):

* ``keys``: the DTOC key of each slot (a sequence of length <= N; ``""`` or
  None for padding).  Without it, keys are read from the ``- <key> [visible|HIDDEN]``
  lines of ``info["text"]`` (ReplayEnv's text view lists them in slot order);
  without either, the policy invents slot keys ``s000``, ``s001``, ... and
  builds the listing itself, so it still works on a bare observation.
* ``store_listing`` / ``recent_reasoning``: the two parts of the text view; else
  split out of ``info["text"]``; else the listing is built from ``obs``
  (+ ``slot_steps`` and ``previews`` when given).
* ``active_tokens``, ``budget_tokens``, ``step``, ``model_family``: else taken
  from ``obs["globals"]`` / ``obs["family"]``.

Answers
-------
Tool-calling backends return tool calls; text backends (local models) write
text, parsed by :func:`parse_text_answer` from either a JSON object
(``{"enable": [...], "disable": [...]}``, or ``{"name": "manage_context",
"arguments": {...}}``) or ``manage_context(enable=[...], disable=[...])`` syntax
(the last such answer in the text wins; ``<think>`` blocks are ignored).

Invalid answers never raise.  Each problem is counted in ``policy.errors``
(a ``Counter`` by kind, see :data:`ERROR_KINDS`), logged, and kept in
``policy.error_log``.  With ``on_invalid="partial"`` (default) keys are judged
one by one like the real tool (:func:`dtoc_rl.core.manage.apply_manage_context`):
unknown keys, non-string keys and keys in both lists are dropped, the valid
rest is applied.  With ``on_invalid="noop"`` any error makes the whole answer a
no-op.  Answers that cannot be read at all (backend failure, no tool call, a
different tool, unparseable or non-object arguments) are always a no-op.
Enabling a visible output or disabling a hidden one is not an error: it is
left out of the action and counted in ``stats["unchanged"]``.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dtoc_rl.core.manage import MANAGE_CONTEXT_DESCRIPTION, MANAGE_CONTEXT_NAME, openai_tool, parse_arguments
from dtoc_rl.data.models import FAMILIES, normalize_family
from dtoc_rl.engine.features import GLOBAL_FEATURES, ITEM_FEATURES
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES
from dtoc_rl.policies.base import Policy, empty_action
from dtoc_rl.policies.llm_backends import BackendError, LLMBackend, Reply, ToolCall

__all__ = [
    "ANSWER_FORMAT_TEXT",
    "ANSWER_FORMAT_TOOLS",
    "ERROR_KINDS",
    "PACKAGE_PROMPT_DIR",
    "PLACEHOLDERS",
    "PromptTemplate",
    "PromptedLLMPolicy",
    "available_prompts",
    "find_prompt",
    "load_prompt",
    "parse_text_answer",
]

log = logging.getLogger(__name__)

PACKAGE_PROMPT_DIR = Path(__file__).resolve().parent / "prompts"

#: Every error kind the policy counts.  ``backend_*`` come from the backend
#: (after its retries); the rest judge the answer.
ERROR_KINDS: tuple[str, ...] = (
    "backend_timeout",  # every attempt timed out
    "backend_connection",  # could not connect
    "backend_http",  # HTTP error status (408/409/429/5xx after retries; other 4xx at once)
    "backend_bad_response",  # a 2xx whose body was not a chat answer
    "backend_error",  # anything else (local generation failure, SDK error)
    "no_tool_call",  # no manage_context call in the answer
    "wrong_tool",  # tool call(s), none of them manage_context
    "extra_calls",  # several manage_context calls; the first was used
    "bad_json",  # arguments could not be parsed
    "bad_arguments",  # arguments not an object, or enable/disable not lists
    "extra_arguments",  # arguments other than enable/disable (ignored)
    "bad_key",  # a key that is not a string
    "unknown_key",  # a key not in the listing
    "conflict",  # a key in both enable and disable
    "no_key_map",  # the keys of the slots could not be determined
    "internal_error",  # reading the answer raised (a bug or an unforeseen reply shape); no-op
)

#: Template placeholders filled at every decision.
PLACEHOLDERS: dict[str, str] = {
    "store_listing": "one line per stored output, oldest first: key, visibility, step, tokens, preview",
    "recent_reasoning": "the agent's recent reasoning (may be '(none)')",
    "active_tokens": "tokens in the active context now, e.g. '12,345'",
    "budget": "the token budget ('0' = none)",
    "budget_line": "a sentence about the budget ('No token budget is set.' when none)",
    "step": "the decision step (model calls made so far)",
    "n_stored": "outputs stored so far",
    "n_listed": "outputs in the listing (at most N)",
    "n_visible": "visible outputs in the listing",
    "n_hidden": "hidden outputs in the listing",
    "saved_tokens": "tokens saved by the outputs hidden now",
    "full_tokens": "active tokens if every output were visible",
    "keys": "the listed keys, comma-separated",
    "tool_name": "manage_context",
    "tool_description": "the tool's description, verbatim (dtoc_rl.core.manage.MANAGE_CONTEXT_DESCRIPTION)",
    "tool_schema": "the tool's JSON parameter schema",
    "answer_format": "how to answer: call the tool (tool backends) or write one line (text backends)",
    "model_family": "the agent's model family",
}

ANSWER_FORMAT_TOOLS = "Answer by calling the manage_context tool exactly once."
ANSWER_FORMAT_TEXT = (
    "Answer with exactly one line and nothing else, in this form, with keys from the listing in "
    "double quotes (either list may be empty):\n"
    "manage_context(enable=[...], disable=[...])"
)

_PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_SECTION_RE = re.compile(r"^<!--\s*(system|user)\s*-->[ \t]*$", re.M | re.I)


# -- prompt files -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptTemplate:
    """A prompt file: front matter (``version``...), a system part and a user part.

    Format::

        ---
        version: 1.0.0
        description: ...
        ---
        <!-- system -->
        ... {tool_description} ...
        <!-- user -->
        ... {store_listing} ... {answer_format}

    Only the names in :data:`PLACEHOLDERS` are substituted; any other text in
    braces (JSON examples) is left as written.  Without section markers the
    whole body is the user message.
    """

    name: str
    version: str
    path: Path
    system: str
    user: str
    meta: Mapping[str, str] = field(default_factory=dict)
    source: str = "file"  # "package", "user" (a prompt_dir) or "file" (an explicit path)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER_RE.findall(self.system + "\n" + self.user))

    @property
    def unknown_placeholders(self) -> set[str]:
        return self.placeholders - set(PLACEHOLDERS)

    def render(self, values: Mapping[str, Any]) -> tuple[str, str]:
        def sub(text: str) -> str:
            return _PLACEHOLDER_RE.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], text)

        return sub(self.system).strip(), sub(self.user).strip()


def load_prompt(path: str | Path, source: str = "file") -> PromptTemplate:
    """Read a prompt file (see :class:`PromptTemplate`)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    body = text
    lines = text.splitlines(keepends=True)
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                for ln in lines[1:i]:
                    k, sep, v = ln.partition(":")
                    if sep and k.strip() and not k.lstrip().startswith("#"):
                        meta[k.strip()] = v.strip().strip("'\"")
                body = "".join(lines[i + 1 :])
                break
        else:
            raise ValueError(f"{path}: front matter opened with '---' is never closed")
    parts = _SECTION_RE.split(body)
    system, user = "", body
    if len(parts) > 1:
        sections = {parts[i].lower(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
        system, user = sections.get("system", ""), sections.get("user", "")
    if not user.strip():
        raise ValueError(f"{path}: the prompt has no user part")
    tpl = PromptTemplate(
        name=path.name,
        version=meta.get("version", "unversioned"),
        path=path.resolve(),
        system=system.strip("\n"),
        user=user.strip("\n"),
        meta=meta,
        source=source,
    )
    if tpl.unknown_placeholders:
        log.warning("%s: unknown placeholders left as written: %s", path, sorted(tpl.unknown_placeholders))
    return tpl


def _candidates(family: str | None) -> list[str]:
    """``claude-sonnet`` → ``[claude-sonnet, claude, default]``."""
    out: list[str] = []
    parts = (family or "").split("-")
    for i in range(len(parts), 0, -1):
        name = "-".join(parts[:i])
        if name and name not in out:
            out.append(name)
    return [*out, "default"]


def available_prompts(prompt_dir: str | Path | None = None) -> dict[str, Path]:
    """Prompt name (file stem) → file, a ``prompt_dir``'s files shadowing the package's."""
    found = {p.stem: p for p in sorted(PACKAGE_PROMPT_DIR.glob("*.md"))}
    if prompt_dir is not None:
        found.update({p.stem: p for p in sorted(Path(prompt_dir).glob("*.md"))})
    return found


def find_prompt(family: str | None = None, prompt_dir: str | Path | None = None) -> PromptTemplate:
    """The prompt for a model family.

    Tries ``<family>.md``, then shorter dash-prefixes (``claude-opus`` →
    ``claude.md``), then ``default.md`` - first in ``prompt_dir`` (so a user's
    ``default.md`` beats a packaged family variant), then in the package.
    """
    dirs = [(Path(prompt_dir), "user")] if prompt_dir is not None else []
    if prompt_dir is not None and not Path(prompt_dir).is_dir():
        raise FileNotFoundError(f"prompt_dir {prompt_dir} is not a directory")
    dirs.append((PACKAGE_PROMPT_DIR, "package"))
    names = _candidates(family)
    for d, source in dirs:
        for name in names:
            p = d / f"{name}.md"
            if p.is_file():
                return load_prompt(p, source)
    raise FileNotFoundError(f"no prompt among {names} in {[str(d) for d, _ in dirs]}")


# -- reading text answers ---------------------------------------------------------------------------------
_THINK_RE = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_THINK_OPEN_RE = re.compile(r"<(?:think|thinking|reasoning)>", re.I)
_CALL_RE = re.compile(r"\bmanage_context\s*\(", re.I)
_KWARG_RE = re.compile(r"[\"']?\b(enable|disable)\b[\"']?\s*[=:]\s*", re.I)
_KEY_TOKEN_RE = re.compile(r"[A-Za-z0-9_.:/-]+")
_ARG_FIELDS = ("arguments", "parameters", "input", "args")


def _balanced(text: str, start: int) -> str:
    """The text inside the bracket opening at ``start`` (to the end if it never closes)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return text[start + 1 : i]
        i += 1
    return text[start + 1 :]


def _literal(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _list_value(rest: str) -> Any:
    """The value after ``enable=``: a list (JSON, Python, or bare tokens) or a single key."""
    if rest.startswith("["):
        inner = _balanced(rest, 0)
        v = _literal(f"[{inner}]")
        if isinstance(v, (list, tuple)):
            return list(v)
        return _KEY_TOKEN_RE.findall(inner)
    m = re.match(r"[\"']?([A-Za-z0-9_.:/-]+)[\"']?", rest)
    return [m[1]] if m else []


def _call_arguments(inner: str) -> str | dict[str, Any]:
    """Arguments of ``manage_context(<inner>)``: a dict, or the raw text when unreadable."""
    s = inner.strip()
    if not s:
        return {}
    if s.startswith("{"):
        v = _literal(s)
        return v if isinstance(v, dict) else s
    args: dict[str, Any] = {}
    for m in _KWARG_RE.finditer(s):
        args.setdefault(m[1].lower(), _list_value(s[m.end() :]))
    return args if args else s


def _json_call(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if "function" in obj and isinstance(obj["function"], dict):
        return _json_call(obj["function"])
    if "name" in obj and any(f in obj for f in _ARG_FIELDS):
        args = next(obj[f] for f in _ARG_FIELDS if f in obj)
        return ToolCall(str(obj["name"]), args)
    if "enable" in obj or "disable" in obj:
        return ToolCall(MANAGE_CONTEXT_NAME, obj)
    return None


def parse_text_answer(text: str) -> ToolCall | None:
    """The manage_context call written in ``text``, or None.

    Reads ``manage_context(enable=[...], disable=[...])`` (JSON or Python
    lists, or bare keys; ``manage_context({...})`` too) and JSON objects
    (``{"enable": [...], "disable": [...]}`` or ``{"name": ..., "arguments": ...}``,
    e.g. inside ``<tool_call>`` tags or code fences).  When the text holds
    several, the last one wins.  ``<think>...</think>`` blocks (and an unclosed
    trailing one) are ignored.  Unreadable arguments come back as the raw
    string, so the caller sees them as a ``bad_json`` error.
    """
    if not text:
        return None
    text = _THINK_RE.sub(" ", text)
    m = _THINK_OPEN_RE.search(text)
    if m:
        text = text[: m.start()]
    cands: list[tuple[int, ToolCall]] = []
    for m in _CALL_RE.finditer(text):
        cands.append(
            (m.start(), ToolCall(MANAGE_CONTEXT_NAME, _call_arguments(_balanced(text, m.end() - 1))))
        )
    dec = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        tc = _json_call(obj)
        if tc is not None:
            cands.append((i, tc))
        i = text.find("{", end if tc is not None else i + 1)
    return max(cands, key=lambda c: c[0])[1] if cands else None


def _is_manage_context(name: str) -> bool:
    return name.strip().split(".")[-1].lower() == MANAGE_CONTEXT_NAME


# -- the policy -------------------------------------------------------------------------------------------
_LISTING_LINE_RE = re.compile(r"^\s*-\s+(\S+)\s+\[(?:visible|HIDDEN)\]", re.M)
_G = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
_F = {name: i for i, name in enumerate(ITEM_FEATURES)}


@dataclass
class Decision:
    """One call to the LLM and what came of it (``policy.last``, ``policy.history``)."""

    step: int
    system: str = ""
    user: str = ""
    reply: Reply | None = None
    enable: list[str] = field(default_factory=list)  # keys applied
    disable: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    key_source: str = ""


class PromptedLLMPolicy(Policy):
    """An LLM, prompted at each decision, answers with a manage_context call.

    Arguments:

    * ``backend``: an :class:`~dtoc_rl.policies.llm_backends.LLMBackend`.
    * ``prompt_family``: ``"auto"`` (the family of ``backend.model``, via
      :func:`dtoc_rl.data.models.normalize_family`), a family name, or None (``default``).
    * ``prompt_dir``: a folder of the user's prompt files, searched before the
      packaged ones (see :func:`find_prompt`).  ``prompt_file``: one file, used as is.
    * ``every``: ask the LLM every k-th step of an episode (others are no-ops, counted in
      ``stats["skipped"]``); ``min_active_tokens``: skip while the context is smaller.
    * ``on_invalid``: ``"partial"`` or ``"noop"`` (see the module docstring).
    * ``reasoning_chars``: keep the last this-many characters of the recent reasoning.
    * ``keep_history``: keep every :class:`Decision` in ``history`` (prompts included).
    * ``log_first``: log the first this-many errors of each kind at WARNING (then DEBUG).
    """

    name = "llm"

    def __init__(
        self,
        backend: LLMBackend,
        *,
        prompt_family: str | None = "auto",
        prompt_dir: str | Path | None = None,
        prompt_file: str | Path | None = None,
        every: int = 1,
        min_active_tokens: int = 0,
        on_invalid: str = "partial",
        reasoning_chars: int = 2000,
        keep_history: bool = False,
        log_first: int = 5,
    ):
        if on_invalid not in ("partial", "noop"):
            raise ValueError(f"on_invalid must be 'partial' or 'noop', got {on_invalid!r}")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.backend = backend
        if prompt_file is not None:
            self.prompt = load_prompt(prompt_file, "file")
            self.prompt_family = None
        else:
            fam = normalize_family(backend.model) if prompt_family == "auto" else prompt_family
            self.prompt_family = fam
            self.prompt = find_prompt(fam, prompt_dir)
        self.prompt_dir = None if prompt_dir is None else str(prompt_dir)
        self.mode = "tools" if backend.supports_tools else "text"
        self.every = int(every)
        self.min_active_tokens = int(min_active_tokens)
        self.on_invalid = on_invalid
        self.reasoning_chars = int(reasoning_chars)
        self.keep_history = keep_history
        self.log_first = int(log_first)
        self.errors: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.error_log: deque[dict[str, Any]] = deque(maxlen=200)
        self.history: list[Decision] = []
        self.last: Decision | None = None
        self._t = 0

    _POLICY_ARGS = (
        "prompt_family",
        "prompt_dir",
        "prompt_file",
        "every",
        "min_active_tokens",
        "on_invalid",
        "reasoning_chars",
        "keep_history",
        "log_first",
    )

    @classmethod
    def from_spec(cls, *, model: Any = None, backend: str = "openai", **kw: Any) -> PromptedLLMPolicy:
        """Build from registry parameters (``llm:backend=anthropic,model=claude-sonnet-4-5,every=2``).

        ``backend``: ``openai`` (default), ``anthropic``, or ``hf``/``transformers``
        (``model`` is then a local path).  The policy's own arguments
        (``prompt_family``, ``prompt_dir``, ``prompt_file``, ``every``,
        ``min_active_tokens``, ``on_invalid``, ...) go to the policy; all others
        to the backend (``base_url``, ``timeout``, ``max_retries``, ``max_tokens``,
        ``temperature``, ``tool_choice``, ``max_new_tokens``, ...).  ``none`` means None.
        """
        from dtoc_rl.policies.llm_backends import backend_from_spec

        if model is None or model == "":
            raise TypeError("llm policy needs model=NAME (and backend=openai|anthropic|hf)")
        kw = {k: (None if isinstance(v, str) and v.lower() == "none" else v) for k, v in kw.items()}
        pol_kw = {k: kw.pop(k) for k in cls._POLICY_ARGS if k in kw}
        for k in ("prompt_dir", "prompt_file", "prompt_family"):
            if pol_kw.get(k) is not None:
                pol_kw[k] = str(pol_kw[k])
        for k in ("base_url", "api_key", "tool_choice"):
            if kw.get(k) is not None:
                kw[k] = str(kw[k])
        try:
            be = backend_from_spec(f"{backend}:{model}", **kw)
        except ValueError as e:
            raise TypeError(str(e)) from None
        return cls(be, **pol_kw)

    # -- Policy API --------------------------------------------------------------------------------------
    def reset(self, info: dict[str, Any] | None = None) -> None:
        self._t = 0
        self.stats["episodes"] += 1

    def config(self) -> dict[str, Any]:
        return {
            "backend": self.backend.name,
            "model": self.backend.model,
            "mode": self.mode,
            "prompt": self.prompt.name,
            "prompt_version": self.prompt.version,
            "prompt_source": self.prompt.source,
            "prompt_path": str(self.prompt.path),
            "every": self.every,
            "min_active_tokens": self.min_active_tokens,
            "on_invalid": self.on_invalid,
        }

    @property
    def label(self) -> str:
        extra = "".join(
            f",{k}={v}"
            for k, v, default in (
                ("every", self.every, 1),
                ("min_active_tokens", self.min_active_tokens, 0),
                ("on_invalid", self.on_invalid, "partial"),
            )
            if v != default
        )
        return f"{self.name}({self.backend.name}:{self.backend.model},prompt={self.prompt.ref}{extra})"

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        info = info or {}
        mask = np.asarray(obs["item_mask"]).astype(bool)
        n = len(mask)
        action = empty_action(n)
        t = self._t
        self._t += 1
        self.stats["steps"] += 1
        active = self._active_tokens(obs, info)
        if t % self.every or active < self.min_active_tokens or not mask.any():
            self.stats["skipped"] += 1
            return action
        step = int(info.get("step", obs["globals"][_G["step"]]))
        dec = Decision(step=step)
        self.last = dec
        if self.keep_history:
            self.history.append(dec)

        keys, dec.key_source = self._slot_keys(mask, info)
        if keys is None:
            self._error(dec, "no_key_map", "could not tell which key each slot holds; answer skipped")
            return action
        dec.system, dec.user = self.prompt.render(self._values(obs, info, keys, active))

        self.stats["llm_calls"] += 1
        try:
            reply = self.backend.complete(dec.system, dec.user)
        except BackendError as e:
            self._error(dec, e.kind, str(e))
            return action
        except Exception as e:  # a backend bug must not end an RL run
            self._error(dec, "backend_error", f"{type(e).__name__}: {e}")
            return action
        dec.reply = reply
        self.stats["input_tokens"] += reply.input_tokens or 0
        self.stats["output_tokens"] += reply.output_tokens or 0
        self.stats["latency_s"] += reply.latency_s
        try:
            self._apply(dec, reply, keys, obs, action)
        except Exception as e:  # a reply shape nobody foresaw: still never crash the run
            for k in ("enable", "disable"):
                action[k][:] = 0
            dec.enable, dec.disable = [], []
            self._error(dec, "internal_error", f"could not read the answer ({type(e).__name__}: {e})")
        return action

    # -- answer → action --------------------------------------------------------------------------------
    def _apply(
        self, dec: Decision, reply: Reply, keys: list[str | None], obs: dict[str, np.ndarray], action
    ) -> None:
        calls = list(reply.tool_calls)
        if not calls:
            tc = parse_text_answer(reply.text)
            calls = [tc] if tc is not None else []
        if not calls:
            self._error(dec, "no_tool_call", f"no manage_context call in the answer: {_short(reply.text)!r}")
            return
        mine = [c for c in calls if _is_manage_context(c.name)]
        if not mine:
            self._error(dec, "wrong_tool", f"called {[c.name for c in calls]}, not {MANAGE_CONTEXT_NAME}")
            return
        if len(mine) > 1:
            self._error(dec, "extra_calls", f"{len(mine)} manage_context calls; only the first is used")
        enable, disable, perr = parse_arguments(mine[0].arguments)
        for where, msg in perr.items():
            if where == "<arguments>" and "JSON" in msg:
                kind = "bad_json"
            elif where == "<arguments>" and msg.startswith("unexpected"):
                kind = "extra_arguments"
            else:
                kind = "bad_arguments"
            self._error(dec, kind, f"{msg}: {_short(mine[0].arguments)!r}")

        slot_of = {k: i for i, k in enumerate(keys) if k}
        wanted: dict[str, list[str]] = {"enable": [], "disable": []}
        for name, lst in (("enable", enable), ("disable", disable)):
            for k in lst:
                if not isinstance(k, str):
                    self._error(dec, "bad_key", f"key in {name!r} is not a string: {k!r}")
                    continue
                k = k.strip()
                if k in wanted[name]:
                    self.stats["duplicates"] += 1
                elif k not in slot_of:
                    self._error(dec, "unknown_key", f"{name} {k!r}: no such key in the listing")
                else:
                    wanted[name].append(k)
        both = set(wanted["enable"]) & set(wanted["disable"])
        for k in sorted(both):
            self._error(dec, "conflict", f"{k!r} is in both enable and disable; left as it was")
        if dec.errors and self.on_invalid == "noop":
            self.stats["noop_invalid"] += 1
            return
        for name, allowed in (("enable", obs["enable_mask"]), ("disable", obs["disable_mask"])):
            for k in wanted[name]:
                if k in both:
                    continue
                s = slot_of[k]
                if allowed[s]:
                    action[name][s] = 1
                    getattr(dec, name).append(k)
                else:
                    self.stats["unchanged"] += 1
        self.stats["enabled"] += len(dec.enable)
        self.stats["disabled"] += len(dec.disable)
        if not dec.enable and not dec.disable:
            self.stats["noop_answers"] += 1
        if not dec.errors:
            self.stats["answers_ok"] += 1

    def _error(self, dec: Decision, kind: str, message: str) -> None:
        self.errors[kind] += 1
        dec.errors.append((kind, message))
        self.error_log.append({"step": dec.step, "kind": kind, "message": message})
        level = logging.WARNING if self.errors[kind] <= self.log_first else logging.DEBUG
        log.log(level, "%s: step %s: %s: %s", self.label, dec.step, kind, message)

    # -- building the prompt ----------------------------------------------------------------------------
    @staticmethod
    def _active_tokens(obs: dict[str, np.ndarray], info: Mapping[str, Any]) -> int:
        if info.get("active_tokens") is not None:
            return int(info["active_tokens"])
        return round(float(obs["globals"][_G["active_tokens_k"]]) * 1000)

    def _slot_keys(self, mask: np.ndarray, info: Mapping[str, Any]) -> tuple[list[str | None] | None, str]:
        n = len(mask)
        if info.get("keys") is not None:
            raw = list(info["keys"])[:n]
            raw += [None] * (n - len(raw))
            return [str(k) if k and mask[i] else None for i, k in enumerate(raw)], "info"
        text = info.get("store_listing") or info.get("text")
        if text:
            found = _LISTING_LINE_RE.findall(text)
            slots = np.flatnonzero(mask)
            if len(found) != len(slots):
                return None, "text"
            keys: list[str | None] = [None] * n
            for s, k in zip(slots, found):
                keys[s] = k
            return keys, "text"
        return [f"s{i:03d}" if mask[i] else None for i in range(n)], "synthetic"

    def _values(
        self, obs: dict[str, np.ndarray], info: Mapping[str, Any], keys: list[str | None], active: int
    ) -> dict[str, Any]:
        g = np.asarray(obs["globals"], np.float64)
        mask = np.asarray(obs["item_mask"]).astype(bool)
        vis = np.asarray(obs["disable_mask"]).astype(bool) & mask
        listing, reasoning = info.get("store_listing"), info.get("recent_reasoning")
        if (listing is None or reasoning is None) and info.get("text"):
            l2, r2 = _split_text_view(str(info["text"]))
            listing = l2 if listing is None else listing
            reasoning = r2 if reasoning is None else reasoning
        if listing is None:
            listing = _listing_from_obs(obs, info, keys)
        reasoning = (reasoning or "").strip()
        if len(reasoning) > self.reasoning_chars:
            reasoning = "..." + reasoning[-self.reasoning_chars :]
        budget = int(info.get("budget_tokens") or round(g[_G["budget_k"]] * 1000))
        family = info.get("model_family")
        if family is None:
            fid = int(obs.get("family", 0))
            family = FAMILIES[fid] if 0 <= fid < len(FAMILIES) else "other"
        listed = [k for k in keys if k]
        return {
            "store_listing": listing.strip() or "(nothing stored yet)",
            "recent_reasoning": reasoning or "(none)",
            "active_tokens": f"{active:,}",
            "budget": budget,
            "budget_line": (
                f"Token budget: {budget:,} tokens ({active / budget:.0%} used)."
                if budget > 0
                else "No token budget is set."
            ),
            "step": int(info.get("step", g[_G["step"]])),
            "n_stored": int(g[_G["stored"]]),
            "n_listed": len(listed),
            "n_visible": int(vis.sum()),
            "n_hidden": int(mask.sum() - vis.sum()),
            "saved_tokens": f"{round(g[_G['saved_tokens_k']] * 1000):,}",
            "full_tokens": f"{round(g[_G['full_tokens_k']] * 1000):,}",
            "keys": ", ".join(listed),
            "tool_name": MANAGE_CONTEXT_NAME,
            "tool_description": MANAGE_CONTEXT_DESCRIPTION,
            "tool_schema": json.dumps(openai_tool()["function"]["parameters"]),
            "answer_format": ANSWER_FORMAT_TOOLS if self.mode == "tools" else ANSWER_FORMAT_TEXT,
            "model_family": family,
        }


def _split_text_view(text: str) -> tuple[str, str]:
    """ReplayEnv's text view → (listing lines, recent reasoning)."""
    lines = text.splitlines()
    cut = next((i for i, ln in enumerate(lines) if ln.strip().lower() == "recent reasoning:"), len(lines))
    head = lines[:cut]
    if head and head[0].startswith("Active context:"):
        head = head[1:]
    return "\n".join(head), "\n".join(lines[cut + 1 :])


def _listing_from_obs(obs: dict[str, np.ndarray], info: Mapping[str, Any], keys: Sequence[str | None]) -> str:
    items = np.asarray(obs["items"])
    tools = np.asarray(obs.get("item_tool", np.zeros(len(keys), np.int64)))
    steps = info.get("slot_steps")
    previews = info.get("previews")
    out = []
    for i, key in enumerate(keys):
        if not key:
            continue
        f = items[i]
        parts = [f"- {key} [{'visible' if f[_F['visible']] else 'HIDDEN'}]"]
        if steps is not None and i < len(steps) and steps[i] >= 0:
            parts.append(f" step {int(steps[i])},")
        tool = TOOL_CATEGORIES[int(tools[i])] if 0 <= int(tools[i]) < len(TOOL_CATEGORIES) else "other"
        parts.append(f" age {int(f[_F['age']])}, {tool}, ~{round(f[_F['est_tokens_k']] * 1000):,} tokens")
        notes = [
            name
            for name, feat in (("error", "is_error"), ("superseded", "superseded"), ("modified", "modified"))
            if f[_F[feat]]
        ]
        if f[_F["times_needed"]]:
            notes.append(f"used {int(f[_F['times_needed']])}x, last {int(f[_F['since_need']])} steps ago")
        if notes:
            parts.append(f" ({'; '.join(notes)})")
        if previews is not None and i < len(previews) and previews[i]:
            parts.append(f": {previews[i]}")
        out.append("".join(parts))
    return "\n".join(out)


def _short(x: Any, n: int = 160) -> str:
    s = x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, default=repr)
    return s if len(s) <= n else s[: n - 3] + "..."
