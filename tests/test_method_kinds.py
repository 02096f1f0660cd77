"""The torch-free record of the methods names exactly the registry's methods and tree methods;
what the window's process reads of a method (export, serve) imports no torch, and the CLI's
job commands answer without transformers."""

import subprocess
import sys
from pathlib import Path

from specdec_core.run.method_kinds import METHOD_NAMES, TREE_METHODS, is_tree
from specdec_core.run.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]


def test_the_method_names_are_the_registrys_in_its_order():
    assert tuple(METHODS) == METHOD_NAMES


def test_the_tree_methods_are_the_registrys_tree_methods():
    assert {name for name, method in METHODS.items() if method.tree} == TREE_METHODS
    assert all(is_tree(name) == method.tree for name, method in METHODS.items())
    assert not is_tree("hf-assisted")  # a name outside the registry drafts no tree


def test_export_and_serve_import_no_torch():
    script = (
        "import sys\n"
        "from specdec_core.decoding.config import DecodeConfig\n"
        "from specdec_core.serving.serve import serve_command\n"
        "for method in ('eagle2', 'classic', 'ngram'):\n"
        "    serve_command('sglang', method, DecodeConfig(k=3), 'embedded', '')\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_the_data_job_commands_answer_without_loading_transformers(tmp_path):
    """`specdec data status` and `stop` read the job's folder without transformers (4 s to
    import on a 2-core CPU): neither the flags nor the folder's files need it."""
    script = (
        "import sys\n"
        "from specdec_core.cli import main\n"
        f"codes = [main(['data', c, '--work', {str(tmp_path)!r}]) for c in ('status', 'stop')]\n"
        "print(codes, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "[2, 0] False"
    assert "no generation job in" in done.stderr and "no generation job is running" in done.stdout
