"""Acceptance tests of the command line as a user meets it (issue: fresh clone, one-line errors,
run directories that never lie, resume with the whole history, degenerate sizes, package data).

User errors: exit status 2, exactly one stderr line ``geomjax: error: ...``, no traceback, and
nothing created under ``--out``. Expected values come from independent sources: the bundled data's
SHA-256 (hashlib), a bit-exact uninterrupted training run, the zip listing of a built wheel.
"""

from __future__ import annotations

import functools
import json
import lzma
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from geomjax import cli, report
from tests._marks import slow_beyond_first

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n-docs", "2", "--windows-per-doc", "2", "-T", "24", "--batch-size", "2", "--screenot-k", "2",
        "--ood-corpus", "none", "--no-theorem1", "--cluster-windows", "0", "--no-progress"]


def _one_line_error(capsys, argv, match):
    rc = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert len(err) == 1 and err[0].startswith("geomjax: error: "), err
    assert "Traceback" not in err[0] and re.search(match, err[0]), err[0]
    return err[0]


# ------------------------------------------------------------------------------ one-line errors

@pytest.mark.parametrize("argv, match", [
    (["--corpus", "no-such-corpus"], "unknown corpus 'no-such-corpus'"),
    (["--ood-corpus", "no-such-corpus"], "unknown corpus"),
    (["--data-dir", "/nonexistent/data"], r"data folder .* does not exist"),
    (["--model", "/nonexistent/model"], r"--model '/nonexistent/model'"),
    (["--model", "./no_such_dir"], r"--model './no_such_dir': checkpoint directory ./no_such_dir does not exist"),
    (["--corpus", "./missing.txt"], r"corpus path './missing.txt' does not exist"),
    (["--n-docs", "0"], "--n-docs must be >= 1"),
    (["--windows-per-doc", "0"], "--windows-per-doc must be >= 1"),
    (["-T", "10"], r"-T 10 is too short: the study needs at least 10 positions.*-T >= 11"),
    (["-T", "600"], "exceeds the 512 positions"),
    (["--batch-size", "3"], "not a multiple of --batch-size 3"),
    (["--screenot-k", "-1"], "--screenot-k must be >= 0"),
    (["--model", "toy:/nonexistent/run"], "not a `geomjax train` run directory"),
])
def test_geometry_option_errors_are_one_line(tmp_path, capsys, argv, match):
    out = tmp_path / "run"
    _one_line_error(capsys, ["geometry", "--out", str(out), *TINY, *argv], match)
    assert not out.exists() and not list(tmp_path.iterdir())  # validated before anything is created


def test_corrupted_files_and_other_commands(tmp_path, capsys):
    bad_model = tmp_path / "model"
    bad_model.mkdir()
    (bad_model / "config.json").write_text("{not json")
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "a"), *TINY, "--model", str(bad_model)],
                    "not valid JSON")
    data = tmp_path / "data"
    (data / "wikitext-2").mkdir(parents=True)
    (data / "wikitext-2" / "valid.txt.xz").write_bytes(b"not xz at all")
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "b"), *TINY, "--data-dir", str(data)],
                    "not valid xz data")
    _one_line_error(capsys, ["verify", "--source", "no_such_source", "--out", str(tmp_path / "c")],
                    "matches no claim")
    _one_line_error(capsys, ["train", "shakespeare", "--preset", "blog", "--out", str(tmp_path / "d")],
                    "shakespeare --preset blog")
    _one_line_error(capsys, ["report", str(tmp_path / "nothing")], "not a geomjax run directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "model"]


def test_corpus_too_small_names_what_fits(tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("one two three four five six seven eight nine ten " * 20)
    _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "a"), *TINY, "--corpus", str(small)],
                    r"needs 2 document\(s\) of >= 48 tokens, but .* has 1; use --n-docs 1")
    msg = _one_line_error(capsys, ["geometry", "--out", str(tmp_path / "b"), "--preset", "paper",
                                   "--ood-corpus", "none", "--no-progress"], "needs 100 document")
    assert "hf:wikitext:wikitext-103-raw-v1" in msg and "local folder" in msg
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_debug_shows_the_traceback_and_bugs_keep_theirs(tmp_path, capsys, monkeypatch):
    assert cli.main(["--debug", "geometry", "--out", str(tmp_path / "a"), *TINY, "--n-docs", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("geomjax: error: --n-docs")
    monkeypatch.setenv("GEOMJAX_DEBUG", "1")
    assert cli.main(["geometry", "--out", str(tmp_path / "a"), *TINY, "--n-docs", "0"]) == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.delenv("GEOMJAX_DEBUG")

    from geomjax import pipeline

    def boom(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(pipeline, "run_geometry", boom)
    with pytest.raises(RuntimeError, match="a bug"):  # not a user error: propagates (exit 1)
        cli.main(["geometry", "--out", str(tmp_path / "b"), *TINY])
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.partial-*"))


@pytest.mark.parametrize("fails", slow_beyond_first(["figures", "claims"]))  # ~12 s each
def test_demo_error_alongside_the_figures_leaves_no_run(tmp_path, monkeypatch, fails):
    # demo --claims checks the claims while a worker thread draws the figures: an error on either side
    # must abort the run with nothing left behind (and nothing still writing into the directory)
    from geomjax import pipeline, plots

    ran, drawn = [], []
    real = plots.study_figures

    def figures(result):
        if fails == "figures":
            raise RuntimeError("figures failed")
        time.sleep(0.5)  # still drawing when the claims fail
        drawn.append(1)
        return real(result)

    def claims(run, **kw):
        ran.append(kw["select"])
        if fails == "claims":
            raise RuntimeError("claims failed")
        return [], {"results": [], "counts": {}}

    monkeypatch.setattr(plots, "study_figures", figures)
    monkeypatch.setattr(pipeline, "run_claims", claims)
    with pytest.raises(RuntimeError, match=f"{fails} failed"):
        cli.main(["demo", "--claims", "--out", str(tmp_path / "d"), *TINY])
    assert ran == ["song_zhong"] and drawn == ([1] if fails == "claims" else [])
    assert not (tmp_path / "d").exists() and not list(tmp_path.glob(".d.partial-*"))


def test_demo_without_claims_lists_the_recorded_verdicts_and_names_the_flag(tmp_path, monkeypatch):
    """Without --claims the demo checks no claim (issue 36: the Song & Zhong claims do not depend on the model
    studied); its report lists their recorded full verdicts and names the flag that checks them."""
    from geomjax import pipeline
    from geomjax.claims.records import load_full_verdicts

    def claims(run, **kw):
        raise AssertionError("the demo checked claims without --claims")

    monkeypatch.setattr(pipeline, "run_claims", claims)
    assert cli.main(["demo", "--out", str(tmp_path / "d"), *TINY]) == 0
    text = (tmp_path / "d" / "report.md").read_text()
    assert "geomjax demo --claims" in text and "not checked in this run" in text
    metrics = json.loads((tmp_path / "d" / "metrics.json").read_text())["claims"]
    recorded = {k: v["verdict"] for k, v in load_full_verdicts().items() if k.startswith("song_zhong.")}
    assert metrics["checked"] is False and metrics["recorded"] == recorded and len(recorded) >= 20
    for cid, verdict in recorded.items():
        assert f"| {cid} | {verdict} |" in text


# ------------------------------------------------------------------------------ run directories

def test_foreign_or_different_out_is_refused(tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    _one_line_error(capsys, ["geometry", "--out", str(foreign), *TINY], "not a geomjax run")
    assert (foreign / "notes.txt").read_text() == "mine"

    other = tmp_path / "other"  # a finished run of another command
    report.RunDir(other, command="verify", options={"source": None}).finish()
    _one_line_error(capsys, ["geometry", "--out", str(other), *TINY], "holds a `geomjax verify` run")

    done = tmp_path / "done"  # a finished geometry run with other options
    report.RunDir(done, command="geometry", options={"seed": 1}).finish()
    msg = _one_line_error(capsys, ["geometry", "--out", str(done), *TINY], "other options")
    assert "--overwrite" in msg
    assert json.loads((done / "run.json").read_text())["options"] == {"seed": 1}  # untouched


def test_run_dir_is_atomic_and_marked(tmp_path):
    final = tmp_path / "r"
    run = report.RunDir(final, command="geometry", options={"a": 1}, argv=["geometry"])
    assert not final.exists() and run.path.name.startswith(".r.partial-")
    assert json.loads((run.path / "run.json").read_text())["status"] == "running"
    run.write_json("metrics.json", {"x": 1})
    assert run.finish() == final and not run.path.name.startswith(".")
    marker = json.loads((final / "run.json").read_text())
    assert marker["status"] == "complete" and marker["command"] == "geometry"
    assert marker["started"] <= marker["finished"] and marker["versions"]["python"]
    # same command, same options: replaced atomically; --overwrite replaces anything
    again = report.RunDir(final, command="geometry", options={"a": 1})
    again.abandon()
    assert (final / "metrics.json").is_file() and not again.path.exists()
    report.RunDir(final, command="verify", options={}, overwrite=True).finish()
    assert not (final / "metrics.json").exists()


def test_interrupted_run_leaves_no_complete_looking_directory(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "geomjax.cli", "geometry", "--out", str(out), *TINY],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not list(tmp_path.glob(".run.partial-*")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGKILL)  # no chance to clean up
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()  # only the hidden partial folder, without a complete marker
    for partial in tmp_path.glob(".run.partial-*"):
        marker = report.read_run_marker(partial)
        assert marker is None or marker["status"] == "running"
        assert not (partial / "report.html").exists()
    # the next run removes the dead run's partial folder
    report.RunDir(out, command="geometry", options={}).abandon()
    assert not list(tmp_path.glob(".run.partial-*"))


@pytest.mark.slow
def test_resume_keeps_the_whole_history(tmp_path, monkeypatch, shakespeare_smoke_run):
    """`geomjax train` interrupted at step 20, resumed to the end, then called once more (nothing left to
    do); the uninterrupted reference is the session's smoke run (tests/conftest.py)."""
    from geomjax import train

    whole = shakespeare_smoke_run.history
    out = tmp_path / "t"
    real_fit = train.fit
    monkeypatch.setattr(train, "fit", functools.partial(real_fit, stop_at=20))  # an interrupted session
    assert cli.main(["train", "shakespeare", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    first = json.loads((out / "metrics.json").read_text())
    assert first["steps_total"] == 20 and first["resumed_from"] is None and first["evals"]
    assert (out / "figures" / "loss.png").is_file()
    monkeypatch.setattr(train, "fit", real_fit)
    assert cli.main(["train", "shakespeare", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["resumed_from"] == 20 and m["steps_this_session"] == len(whole.steps) - 20
    assert m["steps_total"] == len(whole.steps) and m["sessions"] == 2
    by_step = {e["step"]: e for e in m["evals"]}  # evals of both sessions (+ one at the interruption)
    assert 20 in by_step and all(by_step[e["step"]]["loss"] == e["loss"] for e in whole.evals)
    assert m["final_train_loss"] == float(whole.train["loss"][-1])  # bit-exact resume
    from geomjax.train import merged_history

    h = merged_history(out)
    np.testing.assert_array_equal(h["train"]["loss"], np.asarray(whole.train["loss"], np.float64))
    assert (out / "figures" / "loss.png").is_file()
    assert "2 sessions" in (out / "report.md").read_text()
    # the effective schedule (issue 37): in config.json (fit's), metrics.json and the report
    assert m["effective_schedule"] == json.loads((out / "config.json").read_text())["effective_schedule"]
    assert m["effective_schedule"]["horizon"] == len(whole.steps)
    assert "## Learning-rate schedule (as run)" in (out / "report.md").read_text()
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    # a third call finds the final checkpoint and has nothing left to do
    assert cli.main(["train", "shakespeare", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    third = json.loads((out / "metrics.json").read_text())
    assert third["resumed_from"] == len(whole.steps) and third["steps_this_session"] == 0
    # another preset in the same folder is refused
    assert cli.main(["train", "shakespeare", "--preset", "cpu", "--out", str(out), "--no-progress"]) == 2


# ------------------------------------------------------------------------------ degenerate sizes

@pytest.mark.slow
# geomjax's own notice that ScreeNOT's rank is n/a at these sizes (the tables say "n/a: needs ...")
@pytest.mark.filterwarnings("ignore:layer_metrics. screenot_rank n/a:UserWarning")
def test_one_document_and_short_windows_say_na(tmp_path):
    out = tmp_path / "one"
    argv = ["geometry", "--out", str(out), "--n-docs", "1", "--windows-per-doc", "4", "-T", "12",
            "--batch-size", "4", "--screenot-k", "5", "--ood-corpus", "none", "--no-theorem1",
            "--cluster-windows", "2", "--no-progress"]
    assert cli.main(argv) == 0
    text = (out / "report.md").read_text()
    assert "n/a: needs ≥ 2 documents" in text
    assert "n/a: needs -T ≥ 13 (ScreeNOT with k = 5 needs 2k+1 < 11 positions)" in text
    assert "| None |" not in text and "| nan |" not in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["not_available"]["inter_similarity"] == "n/a: needs ≥ 2 documents"
    assert "T**: 12 tokens, 11 positions analysed" in text
    assert (out / "figures" / "metrics_by_layer.png").is_file()


# ------------------------------------------------------------------------------ package data

def test_bundled_data_is_in_the_wheel(tmp_path):
    """Build a wheel offline from a copy of the sources and find the corpora inside it."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / "geomjax", src / "geomjax", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist")], cwd=src, capture_output=True, text=True)
    if r.returncode != 0 and "No module named" in r.stderr:
        pytest.skip(f"cannot build a wheel offline here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    wheel, = (tmp_path / "dist").glob("geomjax-*.whl")
    from geomjax.data import BUNDLED_FILES

    import hashlib

    with zipfile.ZipFile(wheel) as z:
        for name, digest in BUNDLED_FILES.items():
            raw = lzma.decompress(z.read(f"geomjax/data/files/{name}.xz"))
            assert hashlib.sha256(raw).hexdigest() == digest
