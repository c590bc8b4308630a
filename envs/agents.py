"""Agents that drive LiveEnv: anything with ``next_action(messages, tools) -> response``.

``messages`` is the DTOC-assembled context in OpenAI chat-completions format
(:meth:`dtoc_rl.DTOCContext.to_openai`: tool replies are envelopes or placeholders)
and ``tools`` the tool definitions in the same format.  A response is::

    {"content": "text", "tool_calls": [{"id": "call_1", "name": "bash", "arguments": {...}}],
     "usage": {"input_tokens": ..., "output_tokens": ...}}     # usage optional

``arguments`` may be a dict or JSON text; ``id`` may be missing (the env makes one).
An agent may also have ``model_name`` (prices its calls, see LiveEnv) and
``reset()`` (called at the start of every episode).  An agent that cannot answer
(an endpoint down after its retries) raises :class:`AgentError`; LiveEnv then ends
the episode as truncated.

* :class:`ScriptedAgent`: a fixed list of responses, for tests and demos.
* :class:`TransformersAgent`: a local causal LM (a folder, or a model and
  tokenizer in memory).  It reads tool calls out of the generated text: a
  ``<tool_call>{json}</tool_call>`` block, a JSON object ``{"name": ..., "arguments":
  {...}}``, or a ```` ```bash ```` block.  Text with none of these is a message with
  no tool call, and the episode goes on.
* :class:`OpenAIChatAgent`: any OpenAI-compatible chat-completions endpoint
  (OpenAI, vLLM, llama.cpp server, OpenRouter...), via the ``openai`` SDK.
* :class:`AnthropicAgent`: the Anthropic messages API, via the ``anthropic`` SDK.

Both API agents take ``timeout`` (seconds per request) and ``max_retries``
(the SDKs' own exponential back-off on connection errors, 408/409/429 and 5xx).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dtoc_rl.optional import require

__all__ = [
    "TEXT_PROTOCOL",
    "Agent",
    "AgentError",
    "AnthropicAgent",
    "OpenAIChatAgent",
    "ScriptedAgent",
    "TransformersAgent",
    "make_agent",
    "normalize_response",
    "openai_to_neutral",
    "parse_tool_calls",
]


class AgentError(RuntimeError):
    """The agent could not produce a response (after its own retries)."""


@runtime_checkable
class Agent(Protocol):
    def next_action(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]: ...


def normalize_response(resp: Any) -> dict[str, Any]:
    """Check and normalise an agent response (see the module docstring)."""
    if not isinstance(resp, dict):
        raise AgentError(f"agent response must be a dict, got {type(resp).__name__}")
    content = resp.get("content") or ""
    if not isinstance(content, str):
        raise AgentError(f"agent response 'content' must be a string, got {type(content).__name__}")
    calls = []
    for i, c in enumerate(resp.get("tool_calls") or []):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
            raise AgentError(f"agent tool_calls[{i}] must be a dict with a non-empty 'name', got {c!r}")
        args = c.get("arguments", {})
        if args is None:
            args = {}
        if not isinstance(args, dict | str):
            raise AgentError(f"agent tool_calls[{i}].arguments must be a dict or JSON text")
        cid = c.get("id")
        calls.append(
            {"id": cid if isinstance(cid, str) and cid else None, "name": c["name"], "arguments": args}
        )
    out: dict[str, Any] = {"content": content, "tool_calls": calls}
    if isinstance(resp.get("usage"), dict):
        out["usage"] = resp["usage"]
    return out


# ---------------------------------------------------------------------------- text protocol

TEXT_PROTOCOL = (
    "To use a tool, reply with your reasoning and then exactly one JSON object on its own, for example\n"
    '{"name": "bash", "arguments": {"command": "ls"}}\n'
    "or a ```bash fenced block with one shell command. Call submit when the task is done."
)
_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_BASH_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\s*\n(.*?)```", re.DOTALL)
_MAX_PARSE_CHARS = 20_000


def _as_call(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    name = obj.get("name", obj.get("tool"))
    if isinstance(obj.get("function"), dict):  # {"function": {"name", "arguments"}}
        return _as_call(obj["function"])
    if not isinstance(name, str) or not name.strip():
        return None
    args = obj.get("arguments", obj.get("args", obj.get("parameters", obj.get("input", {}))))
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
            args = parsed if isinstance(parsed, dict) else {"input": args}
        except json.JSONDecodeError:
            args = {"input": args}
    if not isinstance(args, dict):
        return None
    return {"id": None, "name": name.strip(), "arguments": args}


def _json_objects(text: str) -> list[Any]:
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return out
        try:
            obj, end = dec.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            i += 1
            continue
        out.append(obj)
        i = end


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` read from generated text (first matching style wins):
    ``<tool_call>`` blocks, then JSON objects naming a tool, then ```` ```bash ```` blocks."""
    text = text or ""
    scan = text[:_MAX_PARSE_CHARS]
    calls = []
    for block in _TOOL_CALL_TAG.findall(scan):
        calls.extend(c for c in map(_as_call, _json_objects(block)) if c)
    if not calls:
        calls = [c for c in map(_as_call, _json_objects(scan)) if c][:1]
    if not calls:
        m = _BASH_BLOCK.search(scan)
        if m and m.group(1).strip():
            calls = [{"id": None, "name": "bash", "arguments": {"command": m.group(1).strip()}}]
    return text.strip(), calls


def openai_to_neutral(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages → the provider-neutral form :mod:`dtoc_rl.core.render` takes."""
    out = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            out.append({"role": "system", "content": m.get("content") or ""})
        elif role == "user":
            out.append({"role": "user", "content": m.get("content") or ""})
        elif role == "assistant":
            calls = []
            for c in m.get("tool_calls") or []:
                fn = c.get("function", c)
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        args = {"input": args}
                calls.append({"id": c.get("id") or "", "name": fn.get("name", ""), "arguments": args})
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m.get("tool_call_id") or "", "content": m["content"]})
        else:
            raise ValueError(f"unknown message role {role!r}")
    return out


def _tools_text(tools: Sequence[dict[str, Any]]) -> str:
    lines = ["Available tools:"]
    for t in tools:
        fn = t.get("function", t)
        params = ", ".join((fn.get("parameters") or {}).get("properties", {}))
        lines.append(f"- {fn.get('name')}({params}): {fn.get('description', '')}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- scripted


class ScriptedAgent:
    """Replays a fixed script, one entry per model call (from the start at every reset).

    Each entry is a tool call ``{"name", "arguments", "id"?}``, a full response
    ``{"content", "tool_calls": [...]}``, a plain string (a message with no tool
    call), or a callable ``f(messages, tools) -> entry``.  After the script:
    ``then`` (default: a message with no tool call).  ``seen`` keeps the messages
    of every call, for tests.
    """

    def __init__(
        self,
        script: Sequence[dict[str, Any] | str | Callable[..., Any]],
        *,
        then: dict[str, Any] | str | None = None,
        model_name: str = "scripted",
    ):
        self.script = list(script)
        self.then = then if then is not None else "(script exhausted)"
        self.model_name = model_name
        self.seen: list[list[dict[str, Any]]] = []
        self._i = 0

    def reset(self) -> None:
        self._i = 0
        self.seen = []

    def next_action(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.seen.append(messages)
        entry = self.script[self._i] if self._i < len(self.script) else self.then
        self._i += 1
        if callable(entry):
            entry = entry(messages, tools)
        if isinstance(entry, str):
            return {"content": entry, "tool_calls": []}
        if "tool_calls" in entry or "content" in entry:
            return {"content": entry.get("content") or "", "tool_calls": list(entry.get("tool_calls") or [])}
        return {"content": "", "tool_calls": [entry]}


# ---------------------------------------------------------------------------- transformers


class TransformersAgent:
    """A local causal LM (``transformers``) as a LiveEnv agent.  Nothing is downloaded.

    Args:
        model: a local folder (loaded with ``local_files_only=True``) or a model object.
        tokenizer: required with a model object; loaded from the folder otherwise.
        max_new_tokens (256), temperature (0 = greedy), top_p (1.0), seed (sampling only).
        max_time: seconds a generation may take (``generate(max_time=...)``).
        max_prompt_tokens: the prompt is cut from the left to this many tokens
            (default: the model's context length minus ``max_new_tokens``).
        use_chat_template: use the tokenizer's chat template when it has one
            (first with native tool messages, then with them flattened to text);
            otherwise, or if the template fails, a plain ``### Role`` transcript.
        model_name: for pricing (default: the folder name or the config's ``name_or_path``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        max_time: float | None = 120.0,
        max_prompt_tokens: int | None = None,
        use_chat_template: bool = True,
        device: str | None = None,
        model_name: str | None = None,
    ):
        import torch  # noqa: F401  (fail early with a clear ImportError)

        if isinstance(model, str | Path):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            path = Path(model)
            if not path.exists():
                raise FileNotFoundError(f"no model folder at {path} (TransformersAgent never downloads)")
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
            model_name = model_name or path.name
        if tokenizer is None:
            raise ValueError("a tokenizer is required when the model is passed as an object")
        self.model = model.to(device) if device else model
        self.model.eval()
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.seed = seed
        self.max_time = max_time
        self.use_chat_template = use_chat_template
        self.model_name = model_name or str(getattr(model.config, "name_or_path", "") or "local-model")
        cfg = model.config
        ctx_len = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 4096
        self.max_prompt_tokens = int(max_prompt_tokens or max(16, ctx_len - self.max_new_tokens))

    # -- prompt ---------------------------------------------------------------------------
    def build_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        tok = self.tokenizer
        guide = _tools_text(tools) + "\n\n" + TEXT_PROTOCOL
        flat = self._flatten(messages, guide)
        if self.use_chat_template and getattr(tok, "chat_template", None):
            for msgs, kw in ((messages, {"tools": tools}), (flat, {})):
                try:
                    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)
                except Exception:
                    continue
        parts = [f"### {m['role'].capitalize()}\n{m['content']}" for m in flat]
        return "\n\n".join(parts) + "\n\n### Assistant\n"

    @staticmethod
    def _flatten(messages: list[dict[str, Any]], guide: str) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        has_system = any(m.get("role") == "system" for m in messages)
        if not has_system:
            out.append({"role": "system", "content": guide})
        for m in openai_to_neutral(messages):
            if m["role"] == "system":
                out.append({"role": "system", "content": f"{m['content']}\n\n{guide}".strip()})
            elif m["role"] == "assistant":
                text = m.get("content") or ""
                for c in m.get("tool_calls") or []:
                    text += "\n" + json.dumps({"name": c["name"], "arguments": c["arguments"]})
                out.append({"role": "assistant", "content": text.strip()})
            elif m["role"] == "tool":
                out.append({"role": "user", "content": f"[tool result {m['tool_call_id']}]\n{m['content']}"})
            else:
                out.append({"role": "user", "content": m["content"]})
        return out

    # -- generation -----------------------------------------------------------------------
    def next_action(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        prompt = self.build_prompt(messages, tools)
        enc = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        ids = enc["input_ids"][:, -self.max_prompt_tokens :]
        if ids.shape[1] == 0:
            bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id or 0
            ids = torch.tensor([[bos]])
        ids = ids.to(self.model.device)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        kw: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "pad_token_id": pad,
            "attention_mask": torch.ones_like(ids),
        }
        if self.max_time:
            kw["max_time"] = self.max_time
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
            if self.seed is not None:
                torch.manual_seed(self.seed)
        else:
            kw["do_sample"] = False
        try:
            with torch.no_grad():
                out = self.model.generate(ids, **kw)
        except (RuntimeError, ValueError, IndexError) as e:
            raise AgentError(f"generation failed: {type(e).__name__}: {e}") from e
        new = out[0, ids.shape[1] :]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        content, calls = parse_tool_calls(text)
        return {
            "content": content,
            "tool_calls": calls,
            "usage": {"input_tokens": int(ids.shape[1]), "output_tokens": int(new.shape[0])},
        }


# ---------------------------------------------------------------------------- API agents


class OpenAIChatAgent:
    """An OpenAI-compatible chat-completions endpoint as a LiveEnv agent.

    ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``;
    with a ``base_url`` and no key (a local vLLM or llama.cpp server) the key is
    ``"EMPTY"``.  When the server returns no native tool calls, tool calls written
    in the text are parsed as for :class:`TransformersAgent` (``parse_text_calls``).
    ``client`` injects a ready ``openai.OpenAI`` (tests, custom HTTP clients).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        temperature: float | None = 0.0,
        max_tokens: int | None = 2048,
        parse_text_calls: bool = True,
        extra_body: dict[str, Any] | None = None,
        client: Any = None,
    ):
        openai = require("openai", "an OpenAI-compatible agent")

        self.model_name = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.parse_text_calls = parse_text_calls
        self.extra_body = extra_body
        if client is None:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            if base_url and not base_url.lower().startswith(("http://", "https://")):
                raise ValueError(f"the endpoint URL must start with http:// or https://, got {base_url!r}")
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
            if api_key is None:
                raise ValueError("no API key: pass api_key=, or set OPENAI_API_KEY (or OPENAI_BASE_URL)")
            client = openai.OpenAI(
                base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
            )
        self.client = client
        self._errors = (openai.OpenAIError,)

    def next_action(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model_name, "messages": messages}
        if tools:
            kw["tools"] = tools
        if self.temperature is not None:
            kw["temperature"] = self.temperature
        if self.max_tokens is not None:
            kw["max_tokens"] = self.max_tokens
        if self.extra_body:
            kw["extra_body"] = self.extra_body
        try:
            resp = self.client.chat.completions.create(**kw)
        except self._errors as e:
            where = getattr(self.client, "base_url", None) or "the OpenAI API"
            raise AgentError(f"OpenAI-compatible endpoint {where} failed: {type(e).__name__}: {e}") from e
        if not resp.choices:
            raise AgentError("OpenAI-compatible endpoint returned no choices")
        msg = resp.choices[0].message
        content = msg.content or ""
        calls = [
            {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or "{}"}
            for tc in (msg.tool_calls or [])
            if getattr(tc, "function", None) is not None
        ]
        if not calls and self.parse_text_calls:
            content, calls = parse_tool_calls(content)
        out: dict[str, Any] = {"content": content, "tool_calls": calls}
        u = getattr(resp, "usage", None)
        if u is not None:
            details = getattr(u, "prompt_tokens_details", None)
            out["usage"] = {
                "input_tokens": u.prompt_tokens,
                "output_tokens": u.completion_tokens,
                "cache_read_tokens": getattr(details, "cached_tokens", None) or 0,
            }
        return out


def _anthropic_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        fn = t.get("function", t)
        out.append(
            {
                "name": fn["name"],
                "description": fn.get("description", ""),
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return out


class AnthropicAgent:
    """The Anthropic messages API as a LiveEnv agent.

    ``base_url`` / ``api_key`` default to ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``.
    The OpenAI-format context is rendered with :func:`dtoc_rl.core.render.to_anthropic`.
    ``temperature`` (default None: the model's default) is sent in the request body,
    since recent SDK releases dropped the parameter.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        temperature: float | None = None,
        max_tokens: int = 2048,
        client: Any = None,
    ):
        anthropic = require("anthropic", "an Anthropic agent")

        self.model_name = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        if client is None:
            base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            if not api_key:
                raise ValueError("no API key: pass api_key= or set ANTHROPIC_API_KEY")
            client = anthropic.Anthropic(
                base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
            )
        self.client = client
        self._errors = (anthropic.AnthropicError,)

    def next_action(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        from dtoc_rl.core.render import to_anthropic

        req = to_anthropic(openai_to_neutral(messages))
        kw: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": self.max_tokens,
            "messages": req["messages"],
        }
        if req["system"]:
            kw["system"] = req["system"]
        if tools:
            kw["tools"] = _anthropic_tools(tools)
        if self.temperature is not None:  # sent raw: newer SDKs have no temperature parameter
            kw["extra_body"] = {"temperature": self.temperature}
        try:
            resp = self.client.messages.create(**kw)
        except self._errors as e:
            where = getattr(self.client, "base_url", None) or "the Anthropic API"
            raise AgentError(f"Anthropic endpoint {where} failed: {type(e).__name__}: {e}") from e
        texts, calls = [], []
        for block in resp.content or []:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                calls.append({"id": block.id, "name": block.name, "arguments": dict(block.input or {})})
        out: dict[str, Any] = {"content": "\n".join(texts), "tool_calls": calls}
        u = getattr(resp, "usage", None)
        if u is not None:
            out["usage"] = {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_read_tokens": getattr(u, "cache_read_input_tokens", None) or 0,
            }
        return out


def make_agent(spec: Any, **kwargs: Any) -> Any:
    """An agent from a spec: an agent object (returned as is), ``"openai:MODEL"``,
    ``"anthropic:MODEL"``, or ``"hf:PATH"`` / a local model folder.  ``kwargs`` go
    to the agent's constructor."""
    if not isinstance(spec, str | Path):
        if not hasattr(spec, "next_action"):
            raise TypeError(
                f"an agent needs a next_action(messages, tools) method; got {type(spec).__name__}"
            )
        return spec
    text = str(spec)
    kind, sep, rest = text.partition(":")
    if sep and kind == "openai":
        return OpenAIChatAgent(rest, **kwargs)
    if sep and kind == "anthropic":
        return AnthropicAgent(rest, **kwargs)
    if sep and kind in ("hf", "transformers"):
        return TransformersAgent(rest, **kwargs)
    if Path(text).is_dir():
        return TransformersAgent(text, **kwargs)
    raise ValueError(
        f"unknown agent spec {text!r}: use 'openai:MODEL', 'anthropic:MODEL', 'hf:/path/to/model' "
        "or an agent object"
    )
