"""Chat backends for :class:`~dtoc_rl.policies.llm.PromptedLLMPolicy`.

A backend turns one (system, user) prompt into a :class:`Reply`: the tool
calls the model made (``name`` + raw ``arguments``) and any text it wrote.
It never interprets the answer; the policy does.

* :class:`TransformersBackend` - a local causal LM (a path or an in-memory
  model + tokenizer).  Text mode: the model writes its answer as text, which
  the policy parses.  Greedy, bounded ``max_new_tokens`` and ``max_time``.
* :class:`OpenAIBackend` - any OpenAI-compatible chat-completions endpoint via
  the ``openai`` SDK, with ``tools=[openai_tool()]`` and ``tool_choice`` forcing
  ``manage_context`` (falling back to ``"required"``, ``"auto"``, then no
  ``tool_choice`` when a server rejects it with an HTTP 400/422 that mentions
  tools; the fallback sticks and is counted in ``stats["tool_choice_fallbacks"]``).
* :class:`AnthropicBackend` - the messages endpoint via the ``anthropic`` SDK,
  with ``tools=[anthropic_tool()]`` and the same forcing/fallback scheme.

Remote backends retry with the SDK's own machinery (as the live agents do): timeouts,
connection errors and HTTP 408, 409, 429 and 5xx are retried up to ``max_retries`` times,
after the server's ``Retry-After`` / ``retry-after-ms`` (seconds or an HTTP date; a longer wait
than ``MAX_RETRY_AFTER_S``, two minutes, is not retried, with either SDK) or else an exponential
backoff from 0.5 s to 8 s with 0-25% jitter; other HTTP errors and malformed responses are not.
Every attempt is still counted (``backend.stats``: ``attempts``, ``retries``, ``http_<status>``
per error response) through the HTTP client's event hooks.  When all attempts fail,
:meth:`LLMBackend.complete` raises :class:`BackendError` whose ``kind`` is one of
``backend_timeout``, ``backend_connection``, ``backend_http``, ``backend_bad_response`` or
``backend_error``.

SDKs and ``transformers`` are imported lazily, in the constructors.
"""

from __future__ import annotations

import email.utils
import logging
import os
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtoc_rl.core.manage import MANAGE_CONTEXT_NAME, anthropic_tool, openai_tool
from dtoc_rl.core.render import message_text
from dtoc_rl.optional import require

__all__ = [
    "AnthropicBackend",
    "BackendError",
    "LLMBackend",
    "OpenAIBackend",
    "Reply",
    "ToolCall",
    "TransformersBackend",
    "backend_from_spec",
]

log = logging.getLogger(__name__)

_TOOL_CHOICES = ("force", "required", "auto", None)
# The longest Retry-After waited out (seconds; a longer one fails the call): the OpenAI SDK's bound.
MAX_RETRY_AFTER_S = 120.0


def _retry_after_s(headers: Any) -> float | None:
    """Seconds a response's ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date) asks
    for, or None when it asks nothing readable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
    except (TypeError, ValueError, IndexError):
        return None


@dataclass
class ToolCall:
    """One tool call: ``arguments`` as the model gave it (a JSON string, a dict, or None)."""

    name: str
    arguments: str | dict[str, Any] | None = None


@dataclass
class Reply:
    """What the model answered."""

    tool_calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    attempts: int = 1
    latency_s: float = 0.0
    finish_reason: str | None = None


class BackendError(Exception):
    """All attempts failed (or the response was unusable).  ``kind`` names the failure."""

    def __init__(self, kind: str, message: str, attempts: int = 1):
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts


class LLMBackend(ABC):
    """Base class.  ``supports_tools``: the API takes tool definitions (else text mode)."""

    name: str = "backend"
    supports_tools: bool = False
    model: str = ""

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    @abstractmethod
    def complete(self, system: str, user: str) -> Reply:
        """One answer to the prompt; raises :class:`BackendError` on failure."""

    def config(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model}


class _RemoteBackend(LLMBackend):
    """Shared retry loop and tool_choice fallback for the HTTP backends."""

    supports_tools = True
    _key_env = ""
    _url_env = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        max_tokens: int,
        temperature: float | None,
        tool_choice: str | None,
        extra_body: dict[str, Any] | None,
    ):
        super().__init__()
        if tool_choice not in _TOOL_CHOICES:
            raise ValueError(f"tool_choice must be one of {_TOOL_CHOICES}, got {tool_choice!r}")
        if timeout <= 0 or max_retries < 0:
            raise ValueError("timeout must be > 0 and max_retries >= 0")
        self.model = model
        self.base_url = base_url or os.environ.get(self._url_env) or None
        if self.base_url and not self.base_url.lower().startswith(("http://", "https://")):
            raise ValueError(
                f"{type(self).__name__}: the endpoint URL must start with http:// or https://, "
                f"got {self.base_url!r}"
            )
        key = api_key or os.environ.get(self._key_env)
        if not key:
            if self.base_url is None:
                raise ValueError(
                    f"{type(self).__name__}: no API key; pass api_key= or set {self._key_env} "
                    f"(or point base_url / {self._url_env} at a server that needs none)"
                )
            key = "EMPTY"  # local OpenAI/Anthropic-compatible servers usually ignore it
        self._api_key = key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self._choice_level = _TOOL_CHOICES.index(tool_choice)
        self._attempts = 0  # HTTP requests seen by the client's hooks, SDK retries included
        self._call_attempts = 0  # ... of which the current complete() call sent

    @property
    def tool_choice(self) -> str | None:
        """The tool_choice in use now (after any fallback)."""
        return _TOOL_CHOICES[self._choice_level]

    def config(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "tool_choice": self.tool_choice,
        }

    # subclasses: one request; classify SDK exceptions; read the response
    @abstractmethod
    def _request(self, system: str, user: str, tool_choice: str | None) -> Any: ...

    @abstractmethod
    def _classify(self, exc: Exception) -> tuple[str, int | None]:
        """(kind, http status) for an exception raised by ``_request`` (after the SDK's retries)."""

    @abstractmethod
    def _read(self, resp: Any) -> Reply: ...

    def _hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """httpx event hooks that count every attempt the SDK makes, retries included."""

        def on_request(_request: Any) -> None:
            self._attempts += 1

        def on_response(response: Any) -> None:
            if response.status_code >= 400:
                self.stats[f"http_{response.status_code}"] += 1
                # The Anthropic SDK waits whatever a server's Retry-After says (an hour, a day);
                # beyond the bound the call fails at once instead, as the OpenAI SDK's does.
                wait = _retry_after_s(response.headers)
                if wait is not None and not wait <= MAX_RETRY_AFTER_S:
                    response.headers["x-should-retry"] = "false"  # both SDKs obey it

        return {"request": [on_request], "response": [on_response]}

    def _attempt(self, system: str, user: str) -> Any:
        """One request through the SDK (which retries); returns the response or raises."""
        before = self._attempts
        try:
            return self._request(system, user, self.tool_choice)
        finally:
            sent = max(1, self._attempts - before)  # an injected client has no hooks: count 1
            self.stats["attempts"] += sent
            self.stats["retries"] += sent - 1
            self._call_attempts += sent

    def complete(self, system: str, user: str) -> Reply:
        self.stats["calls"] += 1
        t0 = time.monotonic()
        self._call_attempts = 0
        while True:  # tool_choice fallbacks (at most 3 ever) are new requests, not retries
            try:
                resp = self._attempt(system, user)
            except Exception as e:  # SDK errors, classified below
                kind, status = self._classify(e)
                if (
                    status in (400, 422)
                    and "tool" in str(e).lower()
                    and self._choice_level < len(_TOOL_CHOICES) - 1
                ):
                    old = self.tool_choice
                    self._choice_level += 1
                    self.stats["tool_choice_fallbacks"] += 1
                    log.warning(
                        "%s: server rejected the request with tool_choice=%r (HTTP %s); "
                        "retrying with tool_choice=%r",
                        self.name,
                        old,
                        status,
                        self.tool_choice,
                    )
                    continue
                self.stats[kind] += 1
                self.stats["failures"] += 1
                n = self._call_attempts
                raise BackendError(kind, f"{type(e).__name__}: {e} (after {n} attempts)", n) from e
            try:
                reply = self._read(resp)
            except Exception as e:  # a 200 whose body is not the expected shape
                self.stats["backend_bad_response"] += 1
                self.stats["failures"] += 1
                raise BackendError(
                    "backend_bad_response",
                    f"unusable response ({type(e).__name__}: {e})",
                    self._call_attempts,
                ) from e
            reply.attempts = self._call_attempts
            reply.latency_s = time.monotonic() - t0
            self.stats["input_tokens"] += reply.input_tokens or 0
            self.stats["output_tokens"] += reply.output_tokens or 0
            return reply


def _require(obj: Any, what: str) -> Any:
    if obj is None:
        raise ValueError(f"missing {what}")
    return obj


class OpenAIBackend(_RemoteBackend):
    """An OpenAI-compatible chat-completions endpoint.

    ``base_url``/``api_key`` default to ``OPENAI_BASE_URL``/``OPENAI_API_KEY``.
    ``timeout`` is per attempt (seconds); at most ``1 + max_retries`` attempts
    (plus at most three ``tool_choice`` fallbacks).  ``max_tokens_param`` is
    ``"max_tokens"`` (widest support) or ``"max_completion_tokens"`` (OpenAI
    reasoning models); ``temperature=None`` omits it.  ``client`` injects a
    ready ``openai.OpenAI`` (its retries are then its own settings, and each call counts as one
    attempt).
    """

    name = "openai"
    _key_env = "OPENAI_API_KEY"
    _url_env = "OPENAI_BASE_URL"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = 512,
        max_tokens_param: str = "max_tokens",
        temperature: float | None = 0.0,
        tool_choice: str | None = "force",
        extra_body: dict[str, Any] | None = None,
        client: Any = None,
    ):
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key or ("injected" if client is not None else None),
            timeout=timeout,
            max_retries=max_retries,
            max_tokens=max_tokens,
            temperature=temperature,
            tool_choice=tool_choice,
            extra_body=extra_body,
        )
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_param must be 'max_tokens' or 'max_completion_tokens'")
        self.max_tokens_param = max_tokens_param
        openai = require("openai", "an OpenAI-compatible LLM policy")

        self._openai = openai
        self.client = client or openai.OpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=openai.DefaultHttpxClient(event_hooks=self._hooks()),
        )

    def _request(self, system: str, user: str, tool_choice: str | None) -> Any:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]
        kw: dict[str, Any] = {self.max_tokens_param: self.max_tokens}
        if self.temperature is not None:
            kw["temperature"] = self.temperature
        if tool_choice == "force":
            kw["tool_choice"] = {"type": "function", "function": {"name": MANAGE_CONTEXT_NAME}}
        elif tool_choice is not None:
            kw["tool_choice"] = tool_choice
        if self.extra_body:
            kw["extra_body"] = self.extra_body
        return self.client.chat.completions.create(
            model=self.model, messages=messages, tools=[openai_tool()], timeout=self.timeout, **kw
        )

    def _classify(self, exc: Exception) -> tuple[str, int | None]:
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return "backend_timeout", None
        if isinstance(exc, o.APIConnectionError):
            return "backend_connection", None
        if isinstance(exc, o.APIStatusError):
            return "backend_http", getattr(exc, "status_code", None)
        if isinstance(exc, o.APIResponseValidationError):
            return "backend_bad_response", None
        return "backend_error", None

    def _read(self, resp: Any) -> Reply:
        choices = _require(getattr(resp, "choices", None), "choices")
        msg = _require(getattr(choices[0], "message", None), "choices[0].message")
        calls = []
        for tc in getattr(msg, "tool_calls", None) or []:
            fn = _require(getattr(tc, "function", None), "tool_calls[].function")
            calls.append(ToolCall(str(getattr(fn, "name", "") or ""), getattr(fn, "arguments", None)))
        usage = getattr(resp, "usage", None)
        return Reply(
            tool_calls=calls,
            text=message_text(getattr(msg, "content", None), "\n"),
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            finish_reason=getattr(choices[0], "finish_reason", None),
        )


class AnthropicBackend(_RemoteBackend):
    """The Anthropic messages endpoint.

    ``base_url``/``api_key`` default to ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``.
    ``tool_choice``: ``"force"`` (``{"type": "tool", "name": "manage_context"}``),
    ``"required"`` (sent as ``{"type": "any"}``), ``"auto"`` or None.
    ``temperature`` (None = the server's default) travels in ``extra_body``.
    """

    name = "anthropic"
    _key_env = "ANTHROPIC_API_KEY"
    _url_env = "ANTHROPIC_BASE_URL"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int = 1024,
        temperature: float | None = None,
        tool_choice: str | None = "force",
        extra_body: dict[str, Any] | None = None,
        client: Any = None,
    ):
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key or ("injected" if client is not None else None),
            timeout=timeout,
            max_retries=max_retries,
            max_tokens=max_tokens,
            temperature=temperature,
            tool_choice=tool_choice,
            extra_body=extra_body,
        )
        anthropic = require("anthropic", "an Anthropic LLM policy")

        self._anthropic = anthropic
        self.client = client or anthropic.Anthropic(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=anthropic.DefaultHttpxClient(event_hooks=self._hooks()),
        )

    def _request(self, system: str, user: str, tool_choice: str | None) -> Any:
        kw: dict[str, Any] = {}
        if system:
            kw["system"] = system
        if tool_choice == "force":
            kw["tool_choice"] = {"type": "tool", "name": MANAGE_CONTEXT_NAME}
        elif tool_choice == "required":
            kw["tool_choice"] = {"type": "any"}
        elif tool_choice == "auto":
            kw["tool_choice"] = {"type": "auto"}
        body = dict(self.extra_body)
        if self.temperature is not None:
            body.setdefault("temperature", self.temperature)
        if body:
            kw["extra_body"] = body
        return self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            messages=[{"role": "user", "content": user}],
            tools=[anthropic_tool()],
            timeout=self.timeout,
            **kw,
        )

    def _classify(self, exc: Exception) -> tuple[str, int | None]:
        a = self._anthropic
        if isinstance(exc, a.APITimeoutError):
            return "backend_timeout", None
        if isinstance(exc, a.APIConnectionError):
            return "backend_connection", None
        if isinstance(exc, a.APIStatusError):
            return "backend_http", getattr(exc, "status_code", None)
        if isinstance(exc, a.APIResponseValidationError):
            return "backend_bad_response", None
        return "backend_error", None

    def _read(self, resp: Any) -> Reply:
        content = getattr(resp, "content", None)
        if not isinstance(content, list):
            raise ValueError("missing content blocks")
        calls, texts = [], []
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "tool_use":
                calls.append(ToolCall(str(getattr(block, "name", "") or ""), getattr(block, "input", None)))
            elif kind == "text":
                texts.append(message_text(getattr(block, "text", ""), "\n"))
        usage = getattr(resp, "usage", None)
        return Reply(
            tool_calls=calls,
            text="\n".join(texts),
            input_tokens=getattr(usage, "input_tokens", None),
            output_tokens=getattr(usage, "output_tokens", None),
            finish_reason=getattr(resp, "stop_reason", None),
        )


class TransformersBackend(LLMBackend):
    """A local causal LM, in text mode (the policy parses the answer text).

    ``model`` is a local folder or a model id already in the local Hugging Face
    cache (loaded with ``AutoModelForCausalLM`` and ``AutoTokenizer``; nothing is
    downloaded unless ``local_files_only=False``) or an in-memory model, then
    ``tokenizer`` is required.  With a chat template (and ``use_chat_template``) the prompt is a
    system + user conversation, rendered with ``tools=[openai_tool()]`` when
    the template accepts it; otherwise a plain ``system\\n\\nuser\\n`` prompt.
    Decoding is greedy, bounded by ``max_new_tokens`` and ``max_time``
    (seconds).  A prompt longer than ``max_input_tokens`` (default: the
    model's positions minus ``max_new_tokens``) keeps its **last** tokens
    (the answer instructions come last in the prompt files); counted in
    ``stats["truncated_prompts"]``.
    """

    name = "transformers"
    supports_tools = False

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 256,
        max_time: float | None = 60.0,
        max_input_tokens: int | None = None,
        use_chat_template: bool = True,
        template_tools: bool = True,
        device: str | None = None,
        dtype: Any = None,
        local_files_only: bool = True,
        trust_remote_code: bool = False,
        model_name: str | None = None,
    ):
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        if isinstance(model, (str, Path)):
            path = str(model)
            load = {"local_files_only": local_files_only, "trust_remote_code": trust_remote_code}
            try:
                self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path, **load)
                if dtype is not None:
                    load["dtype"] = dtype
                self.lm = AutoModelForCausalLM.from_pretrained(path, **load)
            except OSError as e:
                if not local_files_only:
                    raise
                # nothing is downloaded at run time: a name that is neither a folder nor in the local
                # Hugging Face cache is an error here, not a download
                raise ValueError(
                    f"{path!r} is not a local model folder (or a model in the local Hugging Face cache): "
                    "nothing is downloaded; give the folder a model was saved to"
                ) from e
            self.model = model_name or path
        else:
            if tokenizer is None:
                raise ValueError("an in-memory model needs its tokenizer")
            self.lm, self.tokenizer = model, tokenizer
            self.model = model_name or getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        if device is not None:
            self.lm.to(device)
        self.lm.eval()
        self.max_new_tokens = int(max_new_tokens)
        self.max_time = max_time
        self.use_chat_template = use_chat_template and bool(getattr(self.tokenizer, "chat_template", None))
        self.template_tools = template_tools
        cfg = self.lm.config
        positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        if max_input_tokens is None and positions:
            max_input_tokens = max(16, int(positions) - self.max_new_tokens)
        self.max_input_tokens = max_input_tokens

    def config(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "max_new_tokens": self.max_new_tokens,
            "chat_template": self.use_chat_template,
        }

    def prompt_text(self, system: str, user: str) -> str:
        """The exact text the model is given."""
        if self.use_chat_template:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": user}
            ]
            tries = [{"tools": [openai_tool()]}, {}] if self.template_tools else [{}]
            for extra in tries:
                try:
                    return self.tokenizer.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=True, **extra
                    )
                except Exception:  # templates that reject tools or a system role
                    continue
            self.stats["chat_template_failures"] += 1
        return (f"{system}\n\n" if system else "") + f"{user}\n"

    def complete(self, system: str, user: str) -> Reply:
        torch = self._torch
        self.stats["calls"] += 1
        self.stats["attempts"] += 1
        t0 = time.monotonic()
        try:
            text = self.prompt_text(system, user)
            ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=not self.use_chat_template)[
                "input_ids"
            ]
            if self.max_input_tokens and ids.shape[1] > self.max_input_tokens:
                ids = ids[:, -self.max_input_tokens :]
                self.stats["truncated_prompts"] += 1
            ids = ids.to(self.lm.device)
            pad = self.tokenizer.pad_token_id
            if pad is None:
                pad = self.tokenizer.eos_token_id
            gen: dict[str, Any] = {
                "max_new_tokens": self.max_new_tokens,
                "do_sample": False,
                "pad_token_id": pad,
            }
            if self.max_time:
                gen["max_time"] = float(self.max_time)
            with torch.no_grad():
                out = self.lm.generate(ids, attention_mask=torch.ones_like(ids), **gen)
            new = out[0, ids.shape[1] :]
            answer = self.tokenizer.decode(new, skip_special_tokens=True)
        except Exception as e:
            self.stats["backend_error"] += 1
            self.stats["failures"] += 1
            raise BackendError("backend_error", f"generation failed ({type(e).__name__}: {e})") from e
        self.stats["input_tokens"] += int(ids.shape[1])
        self.stats["output_tokens"] += len(new)
        return Reply(
            text=answer,
            input_tokens=int(ids.shape[1]),
            output_tokens=len(new),
            latency_s=time.monotonic() - t0,
        )


def backend_from_spec(spec: str, **kwargs: Any) -> LLMBackend:
    """``openai:<model>``, ``anthropic:<model>`` or ``hf:<path or hub id>`` → a backend."""
    kind, sep, model = spec.partition(":")
    if not sep or not model:
        raise ValueError(f"backend spec must look like 'openai:gpt-4o'; got {spec!r}")
    kinds: dict[str, type[LLMBackend]] = {
        "openai": OpenAIBackend,
        "anthropic": AnthropicBackend,
        "hf": TransformersBackend,
        "transformers": TransformersBackend,
    }
    if kind not in kinds:
        raise ValueError(f"unknown backend {kind!r}; expected one of {sorted(kinds)}")
    return kinds[kind](model, **kwargs)
