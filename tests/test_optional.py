"""``dtoc_rl.optional.require``: a missing optional package is an error that says how to install it."""

from __future__ import annotations

import json

import pytest

from dtoc_rl.optional import require


def test_an_installed_module_is_returned():
    assert require("json", "anything") is json


def test_a_missing_package_names_the_feature_and_the_pip_command():
    with pytest.raises(
        ImportError,
        match=r"a test feature needs the 'no_such_pkg_dtoc' package.*pip install no_such_pkg_dtoc",
    ):
        require("no_such_pkg_dtoc.sub", "a test feature")
