"""`specdec methods` lists every registered method under its family; a method parameter no
chosen method reads is refused before any model loads."""

from specdec_core.cli import main
from specdec_core.run.methods import METHODS


def test_methods_lists_every_method_under_its_family(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for method in METHODS.values():
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [method.name])
        assert method.summary in lines[at]
        heading = next(line for line in reversed(lines[:at]) if not line.startswith(" "))
        assert heading == f"{method.family}:", method.name


def test_an_unread_method_parameter_is_refused_before_loading(capsys):
    code = main(["generate", "--target", "no/such-model", "--method", "ngram",
                 "--method-param", "window=3", "--prompt", "hi"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "--method-param window" in err and len(err.strip().splitlines()) == 1


def test_train_mlp_speculator_is_a_train_command_with_its_own_flags(capsys):
    code = main(["train", "mlp-speculator", "--target", "/no/such-model", "--out", "unused"])
    assert code == 2
    assert "model not found: /no/such-model" in capsys.readouterr().err
