"""A command line's words, as a POSIX shell splits them: one lexer for the labeller's shell parser
(:mod:`dtoc_rl.labels.shell`) and the tool vocabulary (:func:`dtoc_rl.labels.vocabulary.unwrap_shell`).
One regular-expression pass, linear in the line's length (commands can hold whole files in heredocs).
"""

from __future__ import annotations

import re

__all__ = ["shell_tokens"]

_LEX = re.compile(
    r"""(?P<comment>(?:(?<=[\s;&|()])|^)\#[^\n]*)"""
    r"""|(?P<op>&&|\|\||;;|&>>?|>>|>&|>\||<<<|<<-?|[;&|()\n<>])"""
    r"""|(?P<word>(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s;&|()<>'"\\])+)"""
    r"""|(?P<bad>['"])"""
)
_UNQUOTE = re.compile(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|\\(.)""")
_DQ_ESCAPE = re.compile(r'\\([\\"$`])')


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word and "\\" not in word:
        return word

    def repl(m: re.Match) -> str:
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is not None:
            return _DQ_ESCAPE.sub(r"\1", m.group(2))
        return m.group(3)

    return _UNQUOTE.sub(repl, word)


def shell_tokens(cmd: str) -> list[str]:
    """Split a command line into words (quotes removed) and operators, like a POSIX shell."""
    out = []
    for m in _LEX.finditer(cmd):
        if m.group("comment"):
            continue
        if m.group("op"):
            out.append(m.group("op"))
        elif m.group("word"):
            out.append(_unquote(m.group("word")))
        else:  # an unbalanced quote: keep the rest as plain words
            out.extend(cmd[m.end() :].split())
            break
    return out
