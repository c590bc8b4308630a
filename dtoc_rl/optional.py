"""Optional dependencies: imported when a feature needs them, with an error that says how to get them."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]

# package to install for an import name, when they differ
_PIP_NAMES: dict[str, str] = {}


def require(module: str, purpose: str, extra: str = "live") -> ModuleType:
    """``import module``, or an ImportError naming ``purpose`` and the pip command that fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name not in (module, module.split(".")[0]):
            raise  # the package is there but broken: its own error says more
        pip = _PIP_NAMES.get(module, module.split(".")[0])
        raise ImportError(
            f"{purpose} needs the {pip!r} package, which is not installed: "
            f"pip install {pip}  (or pip install -e '.[{extra}]' in a checkout)"
        ) from None
