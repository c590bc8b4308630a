"""argparse flags from a dataclass whose fields carry ``metadata["help"]``."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

__all__ = ["add_dataclass_arguments", "dataclass_from_args"]


def _base_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def add_dataclass_arguments(p: argparse.ArgumentParser, cls: type, group: str | None = None) -> None:
    g = p.add_argument_group(group) if group else p
    hints = typing.get_type_hints(cls)  # resolves string annotations (from __future__ import annotations)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        tp = _base_type(hints[f.name])
        help_ = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if tp is bool:
            g.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_)
        else:
            g.add_argument(flag, type=tp, default=default, help=f"{help_} (default: {default})")


def dataclass_from_args(cls: type, args: argparse.Namespace) -> Any:
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
