"""Pagination helpers for list endpoints."""

import math


def page_count(total: int, per_page: int) -> int:
    """Number of pages needed to show ``total`` items, ``per_page`` per page."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return math.ceil(total / per_page)


def get_page(items: list, page: int, per_page: int) -> list:
    """Items on ``page`` (pages are numbered from 1)."""
    if page < 1:
        raise ValueError("pages are numbered from 1")
    start = page * per_page
    return items[start : start + per_page]
