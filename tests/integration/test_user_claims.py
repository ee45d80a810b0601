"""``geomjax verify --claims FILE``: a researcher's own claims through the same engine as the built-in sources
(three verdicts, two witnesses, the erratum), and the one-line errors of a file that cannot be used."""

from __future__ import annotations

import re
import sys

import pytest

from geomjax import cli
from geomjax.claims import registration

# ∫₀¹ x² dx = 1/3 holds; "= 1/2" is a wrong constant. The check is a midpoint sum (its error is exactly
# 1/(12 m²) = 8.3e-10 at m = 10⁴, inside the margin 1e-6); the second witness is the antiderivative x³/3 at 1.
USER_FILE = '''
import numpy as np
from geomjax.claims import Claim, Evaluation, Tolerance, register

TITLE = "A calculus textbook"
M = 10_000

def midpoint(budget, key):
    x = (np.arange(M) + 0.5) / M
    return Evaluation(value=np.mean(x ** 2), method="midpoint sum, 10^4 points")

def antiderivative(budget, key):
    return Evaluation(value=1.0 ** 3 / 3, method="antiderivative x^3/3 at 1 (exact)")

rule = Tolerance(atol=1e-6, origin="the midpoint sum's error 1/(12 M^2) = 8.3e-10, far inside 1e-6")
register(Claim(id="calculus.square", source="Calculus, eq. (1)", statement="int_0^1 x^2 dx = 1/3",
               predicted=1 / 3, evaluate=midpoint, rule=rule))
register(Claim(id="calculus.square_misprint", source="Calculus, eq. (2)", statement="int_0^1 x^2 dx = 1/2",
               predicted=0.5, evaluate=midpoint, rule=rule, witness=antiderivative,
               printed="int_0^1 x^2 dx = 1/2", error_kind="wrong constant"))
'''


@pytest.fixture
def user_file(tmp_path):
    """Write a user's claims file; unregister its claims and forget its module afterwards."""
    written = []

    def write(text, name="my_claims.py"):
        path = tmp_path / name
        path.write_text(text)
        written.append(path)
        return path

    yield write
    for path in written:
        module = f"geomjax_user_claims_{path.stem}"
        for cid, (_, origin) in list(registration._REGISTRY.items()):
            if origin == module:
                registration.unregister(cid)
        sys.modules.pop(module, None)


def test_user_claims_give_three_verdicts_and_an_erratum(tmp_path, user_file, capsys):
    path = user_file(USER_FILE)
    erratum = tmp_path / "errata.md"
    argv = ["verify", "--claims", str(path), "--out", str(tmp_path / "run"), "--erratum", str(erratum), "--no-progress"]
    assert cli.main(argv) == 0
    assert "2 checked: statements: 1 hold, 1 do not hold, 0 inconclusive (see" in capsys.readouterr().out
    text = erratum.read_text()
    assert "`calculus`: A calculus textbook" in text
    entries = re.findall(r"^#### `([^`]+)`", text, re.M)
    assert entries == ["calculus.square_misprint"]  # the statement that holds is not in the erratum
    entry = text.split("#### `calculus.square_misprint`")[1]
    assert "**Kind:** wrong constant" in entry and "“int_0^1 x^2 dx = 1/2”" in entry
    assert re.search(r"Witness 1:\*\* midpoint sum, 10\^4 points: 0\.333333", entry)
    assert re.search(r"Witness 2:\*\* antiderivative x\^3/3 at 1 \(exact\): 0\.333333", entry)
    assert f"geomjax verify --claims {path} --source calculus.square_misprint" in entry


def _one_line_error(capsys, argv, match):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("geomjax: error: ") and re.search(match, err[0]), err


def test_unusable_claims_files_are_one_line_errors(tmp_path, user_file, capsys):
    _one_line_error(capsys, ["verify", "--claims", str(tmp_path / "absent.py"), "--list"], "no such file")
    _one_line_error(capsys, ["verify", "--claims", "no_such_module_xyz", "--list"], "neither a file nor")
    _one_line_error(capsys, ["verify", "--claims", str(user_file("x = 1\n", "empty.py")), "--list"],
                    "registers no claim")
    builtin = registration.source_names()[0]
    clash = user_file(USER_FILE.replace('id="calculus.', f'id="{builtin}.'), "clash.py")
    _one_line_error(capsys, ["verify", "--claims", str(clash), "--list"], "prefix of a built-in source")
    assert not [c for c in registration._REGISTRY if c.startswith(f"{builtin}.square")]
    _one_line_error(capsys, ["verify", "--claims", str(user_file(USER_FILE, "ok.py")), "--source", "nomatch", "--list"],
                    "matches none of the claims")
