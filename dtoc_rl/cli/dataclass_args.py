"""argparse flags from a dataclass: a config's fields with ``metadata["help"]``, or a script's ``Args``
with a docstring under each field."""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from typing import Any

__all__ = [
    "add_args_fields",
    "add_dataclass_arguments",
    "dataclass_from_args",
    "field_docs",
    "flags_named",
    "given_fields",
]

_GIVEN = "_dataclass_fields_given"


def field_docs(cls: type) -> dict[str, str]:
    """Each field of the dataclass ``cls`` and the string literal under it in its source (CleanRL's
    ``Args`` style: a script's help texts written once, beside the fields), whitespace folded."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    docs, last = {}, None
    for node in tree.body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            last = node.target.id
        elif last and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docs[last], last = " ".join(str(node.value.value).split()), None
    return docs


def _remember(action_cls: type) -> type:
    """``action_cls`` that also records its field as given on the command line (a value equal to the
    default is still given: what a checkpoint keeps unless told otherwise depends on it)."""

    class Given(action_cls):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            given = getattr(namespace, _GIVEN, None) or set()
            given.add(self.dest)
            setattr(namespace, _GIVEN, given)

    return Given


_StoreGiven = _remember(argparse._StoreAction)
_BoolGiven = _remember(argparse.BooleanOptionalAction)


def given_fields(args: argparse.Namespace) -> set[str]:
    """The dataclass fields whose flags the command line gave."""
    return set(getattr(args, _GIVEN, None) or ())


def _base_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def _flag(
    g: Any, f: dataclasses.Field, hint: Any, help_: str, *, track: bool, override: dict | None = None
) -> None:
    """A flag for field ``f`` of type ``hint`` on ``g``: a bool a switch (``--x``/``--no-x``), a
    ``list[T]`` one or more ``T``, anything else one value of its type; its default said once in the
    help; ``track``: the namespace records it as given (:func:`given_fields`); ``override``: keywords
    replacing the derived ones."""
    tp = _base_type(hint)
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        default = None
    kw: dict[str, Any] = {"default": default}
    if tp is bool:
        kw["action"] = _BoolGiven if track else argparse.BooleanOptionalAction
    else:
        kw["action"] = _StoreGiven if track else "store"
        if typing.get_origin(tp) is list:
            kw.update(nargs="+", type=typing.get_args(tp)[0])
        else:
            kw["type"] = tp
        shown = " ".join(map(str, default)) if isinstance(default, list) else default
        if shown not in ("", None) and "(default" not in help_:  # a docstring may say it in words
            help_ += f" (default: {shown})"
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        kw["required"] = True
    help_ = help_.replace("%", "%%")  # argparse formats help texts with %: a default's too
    g.add_argument("--" + f.name.replace("_", "-"), **{"help": help_, **kw, **(override or {})})


def add_dataclass_arguments(p: argparse.ArgumentParser, cls: type, group: str | None = None) -> None:
    """A flag per field of a config dataclass, its help the field's ``metadata["help"]``; the namespace
    records which the command line gave (:func:`given_fields`)."""
    g = p.add_argument_group(group) if group else p
    hints = typing.get_type_hints(cls)  # resolves string annotations (from __future__ import annotations)
    for f in dataclasses.fields(cls):
        _flag(g, f, hints[f.name], f.metadata.get("help", ""), track=True)


def add_args_fields(
    p: argparse.ArgumentParser, cls: type, special: dict[str, dict[str, Any]] | None = None
) -> None:
    """A flag per field of a script's ``Args`` dataclass (CleanRL style), its help the docstring under
    the field (:func:`field_docs`), as :func:`add_dataclass_arguments` makes them.  ``special`` gives a
    field's own ``add_argument`` keywords (``type``, ``choices``, ``nargs``), which replace the derived
    ones.  The scripts' parsers are built here, so that they read flags alike."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        help_ = docs.get(f.name, "")
        _flag(p, f, hints[f.name], help_, track=False, override=(special or {}).get(f.name))


def dataclass_from_args(cls: type, args: argparse.Namespace) -> Any:
    """``cls`` built from the parsed flags; a ValueError its checks raise names the flags, not the
    fields (``--val-fraction must be ...``, as the user typed it)."""
    names = [f.name for f in dataclasses.fields(cls)]
    try:
        return cls(**{n: getattr(args, n) for n in names})
    except ValueError as e:
        raise ValueError(flags_named(str(e), names)) from None


def flags_named(message: str, names: list[str]) -> str:
    # a name with an underscore is a field wherever it stands; a one-word name (epochs, mode) only where
    # the message starts with it, since elsewhere it may be the plain word
    for n in sorted(names, key=len, reverse=True):
        flag = "--" + n.replace("_", "-")
        if "_" in n:
            message = re.sub(rf"(?<![\w-]){re.escape(n)}\b", flag, message)
        elif re.match(rf"{re.escape(n)}\b", message):
            message = flag + message[len(n) :]
    return message
