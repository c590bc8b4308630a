from datetime import date

from dates import format_iso_date, parse_iso_date


def test_parse_unambiguous_date():
    assert parse_iso_date("2024-12-25") == date(2024, 12, 25)


def test_parse_day_and_month_order():
    assert parse_iso_date("2024-03-07") == date(2024, 3, 7)


def test_strips_whitespace():
    assert parse_iso_date(" 2023-01-31\n") == date(2023, 1, 31)


def test_round_trip():
    d = date(1999, 11, 2)
    assert parse_iso_date(format_iso_date(d)) == d
