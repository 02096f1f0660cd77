"""Packaging: every code package is listed in pyproject.toml, resources ship as package data."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_code_package_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    for top in ("specdec_core", "app"):
        for init in (ROOT / top).rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(ROOT).parts)
            assert package in listed, f"add {package} to [tool.setuptools] packages"


def test_resources_are_reachable_as_a_package():
    from specdec_core.resources import resource_path

    assert resource_path().is_dir()


def test_tests_use_public_names_only():
    """No test imports a private name (`_x`) of another module: tests prove behaviour through
    what the code offers, so a refactor of its insides keeps them green."""
    import ast

    private = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names = [a.name for a in node.names if a.name.startswith("_")]
                private += [f"{path.name}: from {node.module} import {n}" for n in names]
    assert private == []
