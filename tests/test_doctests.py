"""The examples in pflax's docstrings run, module by module, as doctests."""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import pflax

MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(pflax.__path__, prefix="pflax.")
    if name != "pflax.__main__"
)


# Modules built on an optional extra: without it they cannot be imported, and are skipped with the reason.
NEEDS_EXTRA = {"pflax.flower.apps": ("flwr", "pip install 'pflax[flower]'")}


def _skip_without_extra(name: str) -> None:
    if name in NEEDS_EXTRA:
        package, how = NEEDS_EXTRA[name]
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{name} needs {package}, which is not installed ({how})")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    _skip_without_extra(name)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {name}"


def _public_without_example(name: str) -> list[str]:
    import ast
    import inspect

    module = importlib.import_module(name)
    tree = ast.parse(inspect.getsource(module))
    missing = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node) or ""
            if ">>>" not in doc:
                missing.append(node.name)
    return missing


@pytest.mark.parametrize("name", MODULES)
def test_public_functions_carry_an_example(name):
    _skip_without_extra(name)
    assert _public_without_example(name) == [], f"{name}: public names without a docstring example"
