"""Minimal HTML escaping for user-supplied text."""

_REPLACEMENTS = [
    ("<", "&lt;"),
    (">", "&gt;"),
    ('"', "&quot;"),
    ("'", "&#x27;"),
    ("&", "&amp;"),
]


def escape_html(text: str) -> str:
    """Escape ``text`` so that it can be placed inside HTML content or an attribute."""
    for char, entity in _REPLACEMENTS:
        text = text.replace(char, entity)
    return text
