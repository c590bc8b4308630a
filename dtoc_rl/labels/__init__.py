"""Hindsight need labels: which earlier tool outputs each step of a logged trajectory used.

:func:`label_trajectory` fills, for every :class:`~dtoc_rl.data.schema.Step`, the
fields ``read_resource``, ``write_resources`` and ``needs``.  A need
``Need(step=i, kind, evidence)`` on step ``j`` says that step ``j`` used the
output of the earlier step ``i``.  Needs only point to steps of an **earlier
turn** that **have an output** (parallel calls of one turn cannot see each
other's outputs), and a step carries at most one need per ``(step, kind)``.

Four kinds
----------
``provenance``
    A span of the step's action (its ``tool_args`` — JSON string values when the
    args are JSON — and its ``assistant_text``) occurs in an earlier output and
    is **not** in the task text, the system prompt, the user/environment
    messages, or the agent's own earlier messages and actions: those are in
    context whatever happens to the outputs, so a span found there is the
    agent's own words, not a copy.  The span is attributed to the **most recent**
    earlier output that contains it (a long span whose parts occur in different
    outputs is split between them).  Evidence is the copied span (the longest
    one per earlier step, cut to ``EVIDENCE_CHARS``).  Spans are found two ways:

    * *token runs*: texts are split into tokens (``\\w+`` words and single
      punctuation characters; whitespace ignored, so re-indented or re-wrapped
      code still matches) and every window of ``window`` consecutive tokens is
      hashed.  Consecutive matching windows attributed to the same step merge
      into a span, which counts when it has at least ``min_span`` non-space
      characters.  Line-number gutters of outputs (``cat -n``, ``nl``, ``grep -n``,
      SWE-agent's ``12:``, Claude Code's ``12→``) are removed before indexing so
      an ``old_str`` copied from a numbered view matches across lines; where the
      numbering jumps (``grep -n`` hits, elided lines) no window spans the gap,
      so a run never joins lines that are not adjacent in the file.  A run must
      also add ``MIN_NOVEL`` (12) characters beyond the tokens covered by
      windows of the excluded text: a window that straddles the agent's own
      words and one or two tokens of an output is a boundary, not a copy.
    * *distinctive atoms*: identifiers, dotted names and paths
      (``\\w+([./-]\\w+)*``, plus their ``/`` suffixes and their ``\\w+``
      components) of at least ``min_atom`` characters that contain ``_``, ``.``,
      ``/``, a digit or a camelCase hump, and upper-case alphanumeric codes of at
      least 6 characters with a digit (booking references such as ``NO6JO3``).
      Python's builtin names (``ValueError``, ``ImportError``) are never distinctive.

    Defaults (``window=6``, ``min_span=24``, ``min_atom=10``) were tuned on the
    130 mini-swe-agent traces in ``../shared/traces``.  Loosening them to
    ``window=4, min_span=14, min_atom=8`` adds 330 needs (+23 %) that are mostly
    boilerplate — ``__init__``, ``setup.py``, ``def __init__(self,``,
    ``raise TypeError("`` — while the shortest spans kept at the defaults are
    still specific statements, paths and messages (``tzname =
    self.get_tzname()``, ``django/contrib/auth/forms.py``, ``Fig: (0.0, 0.0,
    400.0, 400.0)``); atoms of 10+ characters are mostly project identifiers
    (``CombinedExpression``, ``_get_edited_object_pks``).  With the defaults
    about one mini-swe-agent step in four carries a provenance need.

``reaccess``
    The step reads the same resource as an earlier step: the same file with an
    overlapping line range (a whole-file read overlaps every range), the same
    search (pattern and scope), the same directory listing, the same shell
    command, or the same read-only tool call with the same arguments.  The need
    points to the most recent earlier step for each distinct earlier resource
    string.  Evidence is the earlier step's resource string.  A resource
    modified in between is still labelled; :func:`modified_between` tells the
    cases apart.

``edit``
    The step edits a file in place by matching its current text or line
    numbers — an editor's ``str_replace``/``insert`` (SWE-agent, OpenHands,
    Anthropic's text editor), SWE-agent 0.x ``edit N:M``, Claude Code
    ``Edit``/``MultiEdit``, OpenCode ``edit``, ``sed -i`` — whether or not the
    editor accepted it.  The need points to every earlier step that read the
    file and whose text of it is still current (no write to the file since);
    to the latest read when the file was rewritten after all of them; and only
    to those of them the action copied from (a ``provenance`` need), when
    there are such.  Evidence is ``file:PATH``.  A refused edit after a hidden
    view is the typical real miss (``docs/validity.md``); the simulator does
    not charge ``edit`` needs by default (:data:`dtoc_rl.data.schema.MISS_KINDS`).

``reference``
    The action names a DTOC tool key (``t0007``) or the provider tool-call id of
    an earlier step.  Keys map to steps through ``keys`` when given, else
    through the map a DTOC orchestrator saved with its log (``extra["dtoc_keys"]``),
    else through ``"tool_key": "tNNNN"`` envelopes found in outputs, else by ordinal
    (the n-th step with an output has key ``format_key(n)``, as the store
    assigns them).  Evidence is the key or id.

Resources
---------
``read_resource`` holds one resource per line, each ``kind:payload``:

* ``file:PATH`` (whole file), ``file:PATH#L10-50``, ``file:PATH#L10-`` (to the
  end), ``file:PATH#tail20``
* ``search:TOOL:PATTERN@SCOPE`` (``grep``, ``rg``, ``find``, ``glob``,
  ``search_file``, ``search_dir``, ``find_file``, ...)
* ``list:DIR``
* ``cmd:COMMAND`` (any other shell command that is not only a write; the whole
  command, whitespace collapsed)
* ``call:NAME(ARGS)`` (read-only tools such as tau-bench ``get_*`` and
  AutoCodeRover ``search_*``; ARGS is canonical JSON)

``write_resources`` lists modified file paths, ``*`` when a command may
modify unknown files (``git checkout .``, ``git apply``, ``patch``), and
``state:NAME(ARGS)`` for state-changing tool calls (tau-bench ``update_*``).
An edit the editor refused (``No replacement was performed``, SWE-agent 0.x's
lint rejection, Claude Code's ``<tool_use_error>``, any error output of an
editor tool) writes nothing.  An abbreviated whole-file view (SWE-agent 1.x's
outline of a large file, bodies replaced by ``... eliding lines A-B ...``)
reads only the line ranges it shows, so a later view of elided lines is a
first read, not a re-access.

Cost
----
Labelling keeps incremental indexes (hashed token windows and atoms of the
outputs → latest step; hashed windows and atoms of non-output text for the
exclusion; resources → latest step; keys and call ids → step).  Each step
costs time linear in its own action and output text, so a trajectory costs
time linear in its total text, never a scan of every earlier output.
:class:`NeedLabeller` keeps those indexes between calls, so a running agent's
turns are labelled one at a time with the same result.

Modules
-------
:mod:`~dtoc_rl.labels.vocabulary` (the one tool vocabulary: tool names and shell command words →
what the call does, read by the policy's tool categories and by the resource rules),
:mod:`~dtoc_rl.labels.shell` (the shell parser, a handler per command word),
:mod:`~dtoc_rl.labels.calls` (a tool call → its resources), :mod:`~dtoc_rl.labels.resources`
(:class:`Resource`, paths, :func:`modified_between`), :mod:`~dtoc_rl.labels.spans` (the copied-span
index), :mod:`~dtoc_rl.labels.labeller` (:func:`label_trajectory`, :class:`NeedLabeller`) and
:mod:`~dtoc_rl.labels.stats` (:func:`label_stats`).  Everything public is importable from
``dtoc_rl.labels``.

It may import dtoc_rl.core and dtoc_rl.data only (tests/test_layers.py checks this).
"""

from __future__ import annotations

from dtoc_rl.labels.labeller import (
    DEFAULT_MIN_ATOM,
    DEFAULT_MIN_SPAN,
    DEFAULT_WINDOW,
    EVIDENCE_CHARS,
    NeedLabeller,
    label_trajectory,
    unique_digest,
    unique_events,
)
from dtoc_rl.labels.resources import (
    Resource,
    first_modified,
    modified_between,
    modified_by,
    parse_resource,
    read_resources,
    same_path,
    writing_steps,
)
from dtoc_rl.labels.spans import MIN_NOVEL, _SpanIndex
from dtoc_rl.labels.stats import AGE_BUCKETS, label_stats, real_rereads
from dtoc_rl.labels.vocabulary import TOOL_CATEGORIES, base_tool_name, tool_category, tool_category_id

__all__ = [
    "AGE_BUCKETS",
    "DEFAULT_MIN_ATOM",
    "DEFAULT_MIN_SPAN",
    "DEFAULT_WINDOW",
    "EVIDENCE_CHARS",
    "MIN_NOVEL",
    "TOOL_CATEGORIES",
    "NeedLabeller",
    "Resource",
    "base_tool_name",
    "first_modified",
    "label_stats",
    "label_trajectory",
    "modified_between",
    "modified_by",
    "parse_resource",
    "read_resources",
    "real_rereads",
    "same_path",
    "tool_category",
    "tool_category_id",
    "unique_digest",
    "unique_events",
    "writing_steps",
]
# The span index, as dtoc_rl.labels._SpanIndex: tests patch it to count its calls.
_INTERNALS = (_SpanIndex,)
