"""The examples in pflax's docstrings run, module by module, as doctests."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import pflax

MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(pflax.__path__, prefix="pflax.")
    if name != "pflax.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {name}"
