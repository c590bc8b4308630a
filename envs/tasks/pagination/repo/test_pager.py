import pytest
from pager import get_page, page_count


def test_page_count():
    assert page_count(0, 10) == 0
    assert page_count(10, 10) == 1
    assert page_count(11, 10) == 2


def test_first_page():
    assert get_page(list(range(25)), 1, 10) == list(range(10))


def test_last_page():
    assert get_page(list(range(25)), 3, 10) == [20, 21, 22, 23, 24]


def test_bad_page():
    with pytest.raises(ValueError):
        get_page([1, 2, 3], 0, 10)
