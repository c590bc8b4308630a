"""Policy specs: one string per policy, for the CLI and for worker processes.

``NAME`` or ``NAME:key=value,key=value``; ``key=a|b|c`` sweeps a parameter
(one policy per value).  A path to a checkpoint folder loads a learned
policy.  Names: none, last_n, obs_mask, anthropic_clear, opencode_prune, gemini_mask,
budget, hide_big, cache_clear, oracle (``oracle:restores=0``: hidden outputs never shown again;
``oracle:schedule=need``: each output hidden at once after its last need, unpriced;
``oracle:schedule=rule``: the same, timed as the learned policy times its hides),
learned (``learned:path=CKPT,threshold=0.3``), llm (see
``dtoc_rl.policies.llm``).

A user's own policy is ``module:Class`` or ``module:Class:key=value,...``
(``package.module:factory`` too): the module is imported (from ``sys.path``,
else the current directory), the class or factory is called with the
parameters, and the result must have an ``act(obs, info)`` method, as a
:class:`~dtoc_rl.policies.base.Policy` has.  In Python, :func:`make_policy`
also takes a ready policy object and returns it unchanged.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from dtoc_rl.policies.base import Policy, check_policy
from dtoc_rl.policies.baselines import (
    AnthropicClearToolUses,
    CacheAwareClear,
    GeminiCliMasking,
    HideBig,
    LastNObservations,
    LoggedVisibility,
    NoManagement,
    ObservationMasking,
    OpenCodePrune,
    TokenBudget,
)

__all__ = [
    "BASELINES",
    "PolicySpecError",
    "baseline_synopsis",
    "expand_specs",
    "make_policy",
    "policy_names",
    "short_label",
]

BASELINES: dict[str, type[Policy]] = {
    "none": NoManagement,
    "last_n": LastNObservations,
    "obs_mask": ObservationMasking,
    "anthropic_clear": AnthropicClearToolUses,
    "opencode_prune": OpenCodePrune,
    "gemini_mask": GeminiCliMasking,
    "budget": TokenBudget,
    "hide_big": HideBig,
    "cache_clear": CacheAwareClear,
    "logged": LoggedVisibility,
}


class PolicySpecError(ValueError):
    pass


def policy_names() -> list[str]:
    return [*BASELINES, "oracle", "learned", "llm"]


def baseline_synopsis() -> str:
    """The rule baselines as ``name[:key=default,...]``, from their constructors (for help texts)."""
    out = []
    for name, cls in BASELINES.items():
        shown = [
            f"{k}={p.default}"
            for k, p in inspect.signature(cls).parameters.items()
            if isinstance(p.default, int | float | str) and not isinstance(p.default, bool)
        ]
        out.append(name + (f"[:{','.join(shown)}]" if shown else ""))
    return ", ".join(out)


def _value(v: str) -> Any:
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    if "+" in v:
        return v.split("+")
    return v


def _typed(cls: type, kw: dict[str, Any], spec: str) -> dict[str, Any]:
    """Check and convert a built-in policy's parameters against its constructor's defaults.

    Spec values are parsed without knowing their parameter (``5`` is an int, ``2.5`` a float,
    ``abc`` a string); this gives each the type of the parameter's default, so that a wrong value
    is named with its parameter instead of failing somewhere inside the policy."""
    params = {
        name: p
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    out: dict[str, Any] = {}
    for key, value in kw.items():
        if key not in params:
            known = ", ".join(params) or "none"
            raise PolicySpecError(f"policy {spec!r}: unknown parameter {key!r} (known: {known})")
        default = params[key].default
        if isinstance(default, bool):
            if value in (0, 1) and not isinstance(value, float):  # 1 and 0 read as true and false
                value = bool(value)
            if not isinstance(value, bool):
                raise PolicySpecError(f"policy {spec!r}: {key} must be true or false (1 or 0), got {value!r}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise PolicySpecError(f"policy {spec!r}: {key} must be an integer, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise PolicySpecError(f"policy {spec!r}: {key} must be a finite number, got {value!r}")
            value = float(value)
        elif isinstance(default, tuple | list):
            value = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        out[key] = value
    return out


_IDENT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _user_target(spec: str) -> tuple[str, str] | None:
    """``("module:attr", "params")`` when ``spec`` names a user's class or factory, else None."""
    module, sep, rest = spec.partition(":")
    module = module.strip()
    if not sep or module in policy_names() or not _IDENT.fullmatch(module):
        return None
    attr, _, params = rest.partition(":")
    if not _IDENT.fullmatch(attr.strip()):
        return None  # "name:key=value" of a spec that is not a built-in name: reported as unknown
    return f"{module}:{attr.strip()}", params


def _parse(spec: str) -> tuple[str, dict[str, list[str]]]:
    user = _user_target(spec)
    if user:
        name, rest = user
    else:
        name, _, rest = spec.partition(":")
    params: dict[str, list[str]] = {}
    for part in filter(None, rest.split(",")):
        key, eq, val = part.partition("=")
        if not eq:
            raise PolicySpecError(f"policy {spec!r}: parameter {part!r} is not key=value")
        if key.strip() in params:  # the later would win unseen: a sweep is written a|b
            raise PolicySpecError(
                f"policy {spec!r}: {key.strip()} is given twice (a sweep is {key.strip()}=a|b)"
            )
        params[key.strip()] = val.split("|")
    return name.strip(), params


def expand_specs(specs: list[str]) -> list[str]:
    """Expand ``key=a|b`` sweeps into one spec per combination."""
    out = []
    for spec in specs:
        if Path(spec).is_dir():
            out.append(spec)
            continue
        name, params = _parse(spec)
        keys = list(params)
        for combo in itertools.product(*(params[k] for k in keys)):
            out.append(name + (":" + ",".join(f"{k}={v}" for k, v in zip(keys, combo)) if keys else ""))
    return out


def _line(e: BaseException) -> str:
    """``Type: first line of the message``: errors stay one line."""
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0]}" if msg else type(e).__name__


def _import_target(target: str, spec: str) -> Any:
    module, _, attr = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        top = module.split(".")[0]
        # `dtoc-rl` runs as a console script, whose sys.path lacks the current directory (python -m has
        # it): look there too, as `python -m` would, so that a policy file next to the user works.
        if e.name != top or cwd in sys.path or "" in sys.path:
            raise PolicySpecError(f"policy {spec!r}: cannot import {module!r} ({_line(e)})") from None
        sys.path.append(cwd)
        try:
            mod = importlib.import_module(module)
        except Exception as e2:
            raise PolicySpecError(f"policy {spec!r}: cannot import {module!r} ({_line(e2)})") from None
    except Exception as e:  # the module itself failed while importing
        raise PolicySpecError(f"policy {spec!r}: importing {module!r} failed: {_line(e)}") from None
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PolicySpecError(f"policy {spec!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _user_policy(target: str, kw: dict[str, Any], spec: str) -> Policy:
    factory = _import_target(target, spec)
    if not callable(factory):
        raise PolicySpecError(f"policy {spec!r}: {target} is not a class or a function")
    try:
        pol = factory(**kw)
    except Exception as e:
        raise PolicySpecError(f"policy {spec!r}: {target}(...) failed: {_line(e)}") from None
    try:
        return check_policy(pol)
    except TypeError as e:
        raise PolicySpecError(f"policy {spec!r}: {target} made a {type(pol).__name__}: {e}") from None


def make_policy(spec: str | Policy) -> Policy:
    """Build one policy from a spec (no sweeps); a policy object is returned as it is."""
    if not isinstance(spec, str | os.PathLike):
        if callable(getattr(spec, "act", None)) or isinstance(spec, type):
            try:
                return check_policy(spec)
            except TypeError as e:
                raise PolicySpecError(str(e)) from None
        raise PolicySpecError(
            f"a policy is a spec string or an object with an act(obs, info) method; got {type(spec).__name__}"
        )
    spec = str(spec)
    if not spec.strip():
        raise PolicySpecError(
            "an empty policy spec: give a rule (last_n:n=5), oracle, a checkpoint folder, ..."
        )
    if Path(spec).is_dir():
        spec = f"learned:path={spec}"
    name, params = _parse(spec)
    kw = {}
    for k, vals in params.items():
        if len(vals) != 1:
            raise PolicySpecError(f"policy {spec!r}: {k} has several values; expand_specs() first")
        kw[k] = _value(vals[0])
    if _user_target(spec):
        return _user_policy(name, kw, spec)
    try:
        if name in BASELINES:
            cls = BASELINES[name]
            try:
                return cls(**_typed(cls, kw, spec))
            except ValueError as e:  # the rule's own range checks: one line, naming the spec
                if isinstance(e, PolicySpecError):
                    raise
                raise PolicySpecError(f"policy {spec!r}: {str(e).strip().splitlines()[0]}") from None
        if name == "oracle":
            from dtoc_rl.policies.oracle import HindsightOracle

            if "cost_config" in kw:  # an object: evaluate's cost options set it
                raise PolicySpecError(f"policy {spec!r}: cost_config is set by the command's cost options")
            typed = _typed(HindsightOracle, kw, spec)
            try:
                return HindsightOracle(**typed)
            except ValueError as e:
                raise PolicySpecError(f"policy {spec!r}: {e}") from None
        if name == "learned":
            from dtoc_rl.policies.learned import LearnedPolicy

            if "path" not in kw:
                raise PolicySpecError("learned policy needs path=CHECKPOINT_DIR")
            pol = LearnedPolicy.load(str(kw.pop("path")))
            spec_keys = ("threshold", "size_weight", "miss_governor", "cold_scale")
            given = {k: kw.pop(k) for k in spec_keys if k in kw}
            for k, v in given.items():
                try:
                    given[k] = float(v)
                except (TypeError, ValueError):
                    raise PolicySpecError(f"policy {spec!r}: {k} must be a number, got {v!r}") from None
            if given:
                try:  # the config's own range checks
                    pol.cfg = dataclasses.replace(pol.cfg, **given)
                except ValueError as e:
                    raise PolicySpecError(f"policy {spec!r}: {e}") from None
            if kw:
                raise PolicySpecError(
                    f"learned policy: unknown parameters {sorted(kw)} (path, {', '.join(spec_keys)})"
                )
            return pol
        if name == "llm":
            from dtoc_rl.policies.llm import PromptedLLMPolicy

            return PromptedLLMPolicy.from_spec(**kw)
    except TypeError as e:
        raise PolicySpecError(f"policy {spec!r}: {e}") from None
    known = ", ".join(policy_names())
    if "/" in name or "\\" in name or name.startswith("."):  # meant as a path
        raise PolicySpecError(
            f"no checkpoint folder at {name!r} (a folder with config.json and model.safetensors); "
            f"or a policy spec, one of: {known}"
        )
    raise PolicySpecError(
        f"unknown policy {name!r}; known: {known}, a checkpoint folder, or module:Class for your own"
    )


def short_label(spec: str) -> str:
    """A display name: ``learned:path=runs/x/policy,threshold=0.3,cold_scale=3`` → ``learned[x/policy]
    t=0.3 cold_scale=3`` (every setting kept, so that two settings of one checkpoint stay apart)."""
    name, params = _parse(spec) if not Path(spec).is_dir() else ("learned", {"path": [spec]})
    if name != "learned" or "path" not in params:
        return spec
    p = Path(params["path"][0])
    tail = "/".join(p.parts[-2:])
    shown = [f"t={v[0]}" if k == "threshold" else f"{k}={v[0]}" for k, v in params.items() if k != "path"]
    return " ".join([f"learned[{tail}]", *shown])
