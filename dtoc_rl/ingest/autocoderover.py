"""AutoCodeRover task directories (the April 2024 "stratified" search agent; MANIFEST §5).

A task dir ``<instance>_<YYYY-MM-DD_hh-mm-ss>/`` holds ``conversation_round_N.json`` (the
cumulative OpenAI-style thread saved at the start of round N, so the last one is the whole
conversation), ``tool_call_layers.json`` (one layer of executed calls per round, then a final
``write_patch`` layer), ``meta.json`` and ``cost.json``.

Per round of ``app/inference.py`` (``start_conversation_round_stratified``): the model answers
with free text; a proxy model extracts ``API_calls`` and ``bug_locations`` from it; then either

* the calls run and one user message collates them as ``Result of <call>:\\n<output>\\n\\n``,
  followed by ``Let's analyze collected context first`` and the model's analysis;
* or bug locations were given: their code is retrieved (``search_for_bug_location``, several
  search calls with fallbacks) and sent as ``Here are the code in buggy locations:\\n…``, which
  ends the search phase; if any lookup failed the model is told ``The buggy locations is not
  precise…`` instead;
* or nothing parsed: ``The search API calls seem not valid…``.

Steps: each ``Result of`` section is one step (``tool_name`` = the API, ``tool_args`` = the
call's keyword arguments as JSON, from the matching ``tool_call_layers.json`` entry when the
layer lines up, else parsed from the header), sharing the ``turn`` of the model message that
asked for them; the buggy-locations message is one step ``search_for_bug_location`` (its
outputs are concatenated without separators, so it cannot be split per call); every other
model message (analysis, answers that yield no call) is a step without a tool.  The patch
writing that follows runs in a separate thread (``debug_agent_write_patch_*.json``) and is
not part of this trajectory.

Labels: the nearest ``selected_labels.jsonl`` (derived from the eval README tables), joined on
``task_dir``, else on ``instance_id``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtoc_rl.data.models import normalize_family
from dtoc_rl.data.schema import Step, Trajectory
from dtoc_rl.ingest.base import Ingester, IngestError, read_json
from dtoc_rl.ingest.common import cap_output, finalize, find_upwards, load_selected_labels, new_step

__all__ = ["AutoCodeRoverIngester"]

_ROUND = re.compile(r"conversation_round_(\d+)\.json$")
_TASK_DIR = re.compile(r"^(.+?)_(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)$")
_RESULT_START = re.compile(r"(?m)^Result of (\w+)\(")
_HEADER_END = re.compile(r"\)[\s;]*:\n")
_ISSUE = re.compile(r"^\s*<issue>(.*?)</issue>\s*$", re.DOTALL)
_ANALYZE = "Let's analyze collected context first"
_BUGLOC = "Here are the code in buggy locations:"
#: SearchManager argument names (the ones ``tool_call_layers.json`` records)
_SIGNATURES = {
    "search_class": ("class_name",),
    "search_class_in_file": ("class_name", "file_name"),
    "search_method": ("method_name",),
    "search_method_in_class": ("method_name", "class_name"),
    "search_method_in_file": ("method_name", "file_name"),
    "search_code": ("code_str",),
    "search_code_in_file": ("code_str", "file_name"),
    "get_class_full_snippet": ("class_name",),
}


def _rounds(path: Path) -> list[tuple[int, Path]]:
    out = []
    for p in path.glob("conversation_round_*.json"):
        m = _ROUND.search(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def _sections(text: str) -> list[tuple[str, str, str]]:
    """``Result of name(args):`` sections of a collated tool response: (name, args text, output)."""
    starts = list(_RESULT_START.finditer(text))
    out = []
    for n, m in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else len(text)
        h = _HEADER_END.search(text, m.end(), end)
        if h is None:  # header without the closing "):" — keep the rest as args
            out.append((m.group(1), text[m.end() : end].strip(), ""))
            continue
        body = text[h.end() : end]
        body = body[:-2] if body.endswith("\n\n") else body
        out.append((m.group(1), text[m.end() : h.start()], body))
    return out


def _args_from_text(name: str, args_text: str) -> dict[str, Any]:
    try:
        values = ast.literal_eval(f"[{args_text}]")
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"raw": args_text}
    names = _SIGNATURES.get(name)
    if names and len(names) == len(values):
        return dict(zip(names, values))
    return {f"arg{i}": v for i, v in enumerate(values)}


def _resource(name: str, args: dict[str, Any]) -> str:
    """A canonical string for one search (identical searches re-read the same content)."""
    return f"{name}({', '.join(json.dumps(v) for v in args.values())})"


def _label(path: Path, instance_id: str) -> tuple[dict | None, str]:
    rows = load_selected_labels(path)
    if not rows:
        return None, ""
    lf = find_upwards(path, "labels/selected_labels.jsonl", 3) or find_upwards(
        path, "selected_labels.jsonl", 3
    )
    label_dir = lf.parent if lf else path.parent
    where = f"{label_dir.name}/{lf.name if lf else 'selected_labels.jsonl'}"
    me = path.resolve()
    for r in rows:
        if r.get("task_dir") and (label_dir / str(r["task_dir"])).resolve() == me:
            return r, where
    same = [r for r in rows if r.get("instance_id") == instance_id]
    return (same[0], where) if len(same) == 1 else (None, "")


class AutoCodeRoverIngester(Ingester):
    name = "autocoderover"
    wants_dirs = True

    def detect(self, path: Path, head: str) -> bool:
        path = Path(path)
        return (
            path.is_dir()
            and (path / "conversation_round_0.json").is_file()
            and ((path / "tool_call_layers.json").is_file() or (path / "meta.json").is_file())
        )

    def parse(self, path: Path) -> Iterator[Trajectory]:
        path = Path(path)
        rounds = _rounds(path)
        if not rounds:
            raise IngestError("no conversation_round_N.json in the task directory", path)
        last_no, last = rounds[-1]
        conv = read_json(last)
        if not isinstance(conv, list):
            raise IngestError(f"{last.name} is {type(conv).__name__}, expected a list of messages", path)
        for i, m in enumerate(conv):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                raise IngestError(f"{last.name}[{i}] is not a {{role, content: str}} message", path)
        if not any(m["role"] == "assistant" for m in conv):
            raise IngestError(f"empty trajectory: no assistant messages in {last.name}", path)

        layers = (
            read_json(path / "tool_call_layers.json") if (path / "tool_call_layers.json").is_file() else None
        )
        meta = read_json(path / "meta.json") if (path / "meta.json").is_file() else {}
        cost = read_json(path / "cost.json") if (path / "cost.json").is_file() else {}
        meta = meta if isinstance(meta, dict) else {}
        cost = cost if isinstance(cost, dict) else {}

        m = _TASK_DIR.match(path.name)
        instance_id = (
            meta.get("task_id")
            or (meta.get("task_info") or {}).get("instance_id")
            or (m.group(1) if m else path.name)
        )

        # Search-phase layers line up with the rounds' selection answers (the analysis answers
        # after "Let's analyze…" make no calls); the last layer is write_patch.
        selections = [
            k
            for k, msg in enumerate(conv)
            if msg["role"] == "assistant" and not (k and conv[k - 1]["content"] == _ANALYZE)
        ]
        search_layers = None
        if isinstance(layers, list) and all(isinstance(x, list) for x in layers):
            body = (
                layers[:-1]
                if layers and any(c.get("func_name") == "write_patch" for c in layers[-1])
                else layers
            )
            if len(body) == len(selections):
                search_layers = body
        layer_of = dict(zip(selections, search_layers)) if search_layers is not None else {}

        system, task = "", ""
        steps: list[Step] = []
        pending: list[str] = []
        consumed: set[int] = set()
        mismatched_rounds = []
        turn = 0
        for k, msg in enumerate(conv):
            role, text = msg["role"], msg["content"]
            if role == "system":
                system = system or text
                continue
            if role == "user":
                if k in consumed:
                    continue
                im = _ISSUE.match(text) if not task and not steps else None
                if im:
                    task = im.group(1).strip()
                else:
                    pending.append(text)
                continue
            if role != "assistant":
                pending.append(text)
                continue
            user_text = "\n\n".join(pending)
            pending = []
            nxt = conv[k + 1]["content"] if k + 1 < len(conv) and conv[k + 1]["role"] == "user" else None
            layer = layer_of.get(k)
            if nxt is not None and _RESULT_START.match(nxt):
                consumed.add(k + 1)
                secs = _sections(nxt)
                use_layer = layer is not None and [c.get("func_name") for c in layer] == [s[0] for s in secs]
                if not use_layer:
                    mismatched_rounds.append(k)
                for n, (name, args_text, out) in enumerate(secs):
                    args = layer[n].get("arguments") if use_layer else None
                    args = args if isinstance(args, dict) else _args_from_text(name, args_text)
                    steps.append(
                        new_step(
                            turn=turn,
                            user_text=user_text if n == 0 else "",
                            assistant_text=text if n == 0 else "",
                            tool_name=name,
                            tool_args=json.dumps(args),
                            output=cap_output(out),
                            read_resource=_resource(name, args),
                        )
                    )
            elif nxt is not None and nxt.startswith(_BUGLOC):
                consumed.add(k + 1)
                calls = layer if layer is not None else []
                steps.append(
                    new_step(
                        turn=turn,
                        user_text=user_text,
                        assistant_text=text,
                        tool_name="search_for_bug_location",
                        tool_args=json.dumps({"calls": calls}),
                        output=cap_output(nxt[len(_BUGLOC) :].removeprefix("\n")),
                    )
                )
            else:
                steps.append(new_step(turn=turn, user_text=user_text, assistant_text=text))
            turn += 1

        extra: dict[str, Any] = {
            "rounds": last_no + 1,
            "layers_matched": search_layers is not None,
        }
        if mismatched_rounds:
            extra["unmatched_layer_messages"] = mismatched_rounds
        if pending:
            extra["trailing_user_text"] = "\n\n".join(pending)
        for key in ("start_epoch", "end_epoch", "elapsed_seconds"):
            if key in cost:
                extra[key] = cost[key]
        label, label_file = _label(path, instance_id)
        if label is not None and "eval_category" in label:
            extra["eval_category"] = label["eval_category"]
        model_raw = str(cost.get("model") or "")
        traj = Trajectory(
            traj_id=f"{self.name}/{path.name}",
            source=self.name,
            model_raw=model_raw,
            model_family=normalize_family(model_raw),
            task_id=instance_id,
            task_text=task or str((meta.get("task_info") or {}).get("problem_statement") or ""),
            system_prompt=system,
            success=None if label is None or label.get("resolved") is None else bool(label["resolved"]),
            outcome_source=f"{label_file}:resolved" if label is not None else "",
            cost_usd=cost.get("total_cost"),
            tokens_in=cost.get("total_input_tokens"),
            tokens_out=cost.get("total_output_tokens"),
            api_calls=None,
            source_path=str(path),
            extra=json.dumps(extra),
            steps=steps,
        )
        yield finalize(traj)
