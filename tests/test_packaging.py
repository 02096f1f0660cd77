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


def test_every_folder_of_code_is_a_package():
    """import-linter reads only packages: a folder of modules without `__init__.py` would be
    outside every contract."""
    for top in ("specdec_core", "app"):
        for module in (ROOT / top).rglob("*.py"):
            folder = module.parent
            assert (folder / "__init__.py").is_file(), f"add {folder.relative_to(ROOT)}/__init__.py"


# names of other projects that start with an underscore and are their documented way in
THIRD_PARTY = {
    "_attn_implementation",  # transformers: a model config's attention implementation
    "_linear_pointwise",  # torch.ops.mkldnn: the oneDNN linear kernel
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in THIRD_PARTY


def private_names(source: str) -> list[str]:
    """What a test module takes of another module's private names (`_x`): imports, attribute
    reads (`module._x`, `object._x`), `getattr` / `setattr` / `delattr` with `"_x"`, and dotted
    paths ending in `._x` (monkeypatch's string form). Names the test module defines or assigns
    itself, and attributes of `self` / `cls`, are its own."""
    import ast

    tree = ast.parse(source)
    own = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    own.add(target.id)
                elif isinstance(target, ast.Attribute):
                    own.add(target.attr)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [f"from {node.module} import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            name = getattr(node.args[1], "value", None)
            by_name = called in ("getattr", "setattr", "delattr") and isinstance(name, str)
            if by_name and _private(name):
                found.append(f"line {node.lineno}: {called}(..., {name!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            dotted = node.value.startswith(("specdec_core.", "app."))
            if dotted and _private(node.value.rsplit(".", 1)[-1]):
                found.append(f"line {node.lineno}: {node.value!r}")
    return found


def test_tests_use_public_names_only():
    """No test imports, reads or patches a private name (`_x`) of another module: tests prove
    behaviour through what the code offers, so a refactor of its insides keeps them green."""
    private = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        private += [f"{path.name} {use}" for use in private_names(path.read_text("utf-8"))]
    assert private == []


def test_the_public_names_guard_sees_reads_and_patches():
    source = (
        "import m\n"
        "from m import _hidden\n"
        "x = m._state\n"
        "monkeypatch.setattr(m, '_forward', f)\n"
        "monkeypatch.setattr('specdec_core.m._cache', None)\n"
        "y = model.config._attn_implementation\n"
    )
    assert private_names(source) == [
        "from m import _hidden",
        "line 3: ._state",
        "line 4: setattr(..., '_forward')",
        "line 5: 'specdec_core.m._cache'",
    ]
