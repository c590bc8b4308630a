"""Policy specs: one string per policy, for the CLI and for worker processes.

``NAME`` or ``NAME:key=value,key=value``; ``key=a|b|c`` sweeps a parameter
(one policy per value).  A path to a checkpoint folder loads a learned
policy.  Names: none, last_n, obs_mask, anthropic_clear, opencode_prune,
budget, oracle, learned (``learned:path=CKPT,threshold=0.3``), llm (see
``dtoc_rl.policies.llm``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from dtoc_rl.policies.base import Policy
from dtoc_rl.policies.baselines import (
    AnthropicClearToolUses,
    LastNObservations,
    NoManagement,
    ObservationMasking,
    OpenCodePrune,
    TokenBudget,
)

__all__ = ["BASELINES", "PolicySpecError", "expand_specs", "make_policy", "policy_names", "short_label"]

BASELINES: dict[str, type[Policy]] = {
    "none": NoManagement,
    "last_n": LastNObservations,
    "obs_mask": ObservationMasking,
    "anthropic_clear": AnthropicClearToolUses,
    "opencode_prune": OpenCodePrune,
    "budget": TokenBudget,
}


class PolicySpecError(ValueError):
    pass


def policy_names() -> list[str]:
    return [*BASELINES, "oracle", "learned", "llm"]


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


def _parse(spec: str) -> tuple[str, dict[str, list[str]]]:
    name, _, rest = spec.partition(":")
    params: dict[str, list[str]] = {}
    for part in filter(None, rest.split(",")):
        key, eq, val = part.partition("=")
        if not eq:
            raise PolicySpecError(f"policy {spec!r}: parameter {part!r} is not key=value")
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


def make_policy(spec: str) -> Policy:
    """Build one policy from a spec (no sweeps)."""
    if Path(spec).is_dir():
        spec = f"learned:path={spec}"
    name, params = _parse(spec)
    kw = {}
    for k, vals in params.items():
        if len(vals) != 1:
            raise PolicySpecError(f"policy {spec!r}: {k} has several values; expand_specs() first")
        kw[k] = _value(vals[0])
    try:
        if name in BASELINES:
            return BASELINES[name](**kw)
        if name == "oracle":
            from dtoc_rl.policies.oracle import HindsightOracle

            return HindsightOracle(**kw)
        if name == "learned":
            from dtoc_rl.policies.learned import LearnedPolicy

            if "path" not in kw:
                raise PolicySpecError("learned policy needs path=CHECKPOINT_DIR")
            pol = LearnedPolicy.load(str(kw.pop("path")))
            if "threshold" in kw:
                pol.cfg.threshold = float(kw.pop("threshold"))
            if kw:
                raise PolicySpecError(f"learned policy: unknown parameters {sorted(kw)} (path, threshold)")
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
    raise PolicySpecError(f"unknown policy {name!r}; known: {known}, or a checkpoint folder")


def short_label(spec: str) -> str:
    """A display name: ``learned:path=runs/x/policy,threshold=0.3`` → ``learned[x/policy] t=0.3``."""
    name, params = _parse(spec) if not Path(spec).is_dir() else ("learned", {"path": [spec]})
    if name != "learned" or "path" not in params:
        return spec
    p = Path(params["path"][0])
    tail = "/".join(p.parts[-2:])
    thr = params.get("threshold")
    return f"learned[{tail}]" + (f" t={thr[0]}" if thr else "")
