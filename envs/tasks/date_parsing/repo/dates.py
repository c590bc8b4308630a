"""Parsing of the dates found in exported reports."""

from datetime import date, datetime


def parse_iso_date(text: str) -> date:
    """Parse an ISO-8601 calendar date such as ``2024-03-07`` (7 March 2024)."""
    return datetime.strptime(text.strip(), "%Y-%d-%m").date()


def format_iso_date(d: date) -> str:
    """The inverse of :func:`parse_iso_date`."""
    return d.strftime("%Y-%m-%d")
