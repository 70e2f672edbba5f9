"""Nothing the user owns is deleted or overwritten: ``--overwrite`` removes only a run, ``compile -o`` writes only
into a new, empty or job directory and never over the spec it reads, and ``train`` compiles its job inside the run
directory, not into the current folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.runs import RUN_JOB, keep_earlier_run, manifest_kind

SPEC = Path("examples/calculator.yaml").resolve()


def _user_files(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"notes.txt": "mine", "spec.yaml": SPEC.read_text() + "\n# my comment\n"}
    for name, text in files.items():
        (directory / name).write_text(text)
    return files


def _unchanged(directory: Path, files: dict[str, str]) -> bool:
    return sorted(p.name for p in directory.iterdir()) == sorted(files) and all(
        (directory / name).read_text() == text for name, text in files.items())


def _run_dir(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"kind": "run", "spec_hash": "x"}))
    (directory / "eval.json").write_text("{}")
    return directory


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_directory_that_is_not_a_run_is_neither_deleted_nor_moved(tmp_path: Path, overwrite: bool) -> None:
    files = _user_files(tmp_path / "mine")
    with pytest.raises(ValueError, match=r"not a run directory .* nothing was moved or deleted"):
        keep_earlier_run(tmp_path / "mine", overwrite=overwrite)
    assert _unchanged(tmp_path / "mine", files)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        keep_earlier_run(tmp_path / "file", overwrite=overwrite)
    assert (tmp_path / "file").read_text() == "x"


def test_a_run_is_kept_aside_or_deleted_and_a_lone_job_leaves_the_directory_free(tmp_path: Path) -> None:
    kept = keep_earlier_run(_run_dir(tmp_path / "run"))
    assert kept is not None and kept.name.startswith("run@") and manifest_kind(kept) == "run"
    assert not (tmp_path / "run").exists()
    assert keep_earlier_run(_run_dir(tmp_path / "run"), overwrite=True) is None and not (tmp_path / "run").exists()
    (tmp_path / "run" / RUN_JOB).mkdir(parents=True)
    assert keep_earlier_run(tmp_path / "run", overwrite=True) is None and (tmp_path / "run" / RUN_JOB).is_dir()


def test_the_current_directory_is_never_deleted_even_if_it_holds_a_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_dir(tmp_path / "run")
    (run / "sub").mkdir()
    monkeypatch.chdir(run / "sub")
    with pytest.raises(ValueError, match="holds the current directory"):
        keep_earlier_run(run, overwrite=True)
    assert (run / "eval.json").is_file()


def test_train_overwrite_on_the_working_directory_deletes_nothing(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files = _user_files(tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    for out in (".", str(tmp_path / "work")):
        result = CliRunner().invoke(main, ["train", "spec.yaml", "-o", out, "--overwrite"])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: -o ") and "spec being trained" in lines[0], lines
        assert "Traceback" not in result.output
    assert _unchanged(tmp_path / "work", files)
    other = _user_files(tmp_path / "other")
    result = CliRunner().invoke(main, ["train", "spec.yaml", "-o", str(tmp_path / "other"), "--overwrite"])
    assert result.exit_code == 1 and "not a run directory" in result.output, result.output
    assert _unchanged(tmp_path / "other", other)


def test_compile_never_writes_over_the_spec_or_into_a_directory_that_is_not_a_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _user_files(tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    sets = ["--set", "data.train.size=8", "--set", "data.eval.size=4", "--set", "data.dev.size=4"]
    result = CliRunner().invoke(main, ["compile", "spec.yaml", "-o", ".", *sets])
    assert result.exit_code == 1 and "holds the spec being compiled" in result.output, result.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("x")
    result = CliRunner().invoke(main, ["compile", "spec.yaml", "-o", str(mine), *sets])
    assert result.exit_code == 1 and "holds files that are not a job" in result.output, result.output
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]
    assert _unchanged(tmp_path / "work", files)
    job = tmp_path / "job"  # a new directory, then the same job again: a job may be compiled over
    for _ in range(2):
        result = CliRunner().invoke(main, ["compile", "spec.yaml", "-o", str(job), *sets])
        assert result.exit_code == 0, result.output
        assert manifest_kind(job) == "job"
    shutil.rmtree(job)


def test_train_compiles_its_job_inside_the_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job ``train`` compiles and validates lies under ``-o``; nothing is written to the current folder (the
    launch itself is recorded, not run)."""
    from agentbridge.plugins import get_plugins

    backend = type(get_plugins().backends.get("trl"))
    launched: list[Path] = []
    monkeypatch.setattr(backend, "launch", lambda self, job, runner=None, run_dir=None, **kw: launched.append(
        job.path) or run_dir)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    run = tmp_path / "runs" / "calc"
    result = CliRunner().invoke(main, ["train", str(SPEC), "-o", str(run), "--set", "data.train.size=16",
                                       "--set", "data.eval.size=4", "--set", "data.dev.size=4"])
    assert result.exit_code == 0, result.output
    assert launched == [run / RUN_JOB] and manifest_kind(run / RUN_JOB) == "job"
    assert not list((tmp_path / "work").iterdir()), list((tmp_path / "work").iterdir())


def test_report_writes_under_the_first_run_not_the_current_folder(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_dir(tmp_path / "runs" / "a")
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "report" / "report.html").is_file()
    assert not list((tmp_path / "work").iterdir())


def test_overwrite_deletes_the_earlier_run_only_once_the_new_job_validates(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_dir(tmp_path / "runs" / "calc")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["train", str(SPEC), "-o", str(run), "--overwrite", "--set",
                                       "data.train.size=4", "--set", "data.eval.size=4", "--set", "data.dev.size=4"])
    assert result.exit_code == 1 and "0 steps" in result.output, result.output  # TRL's validator refuses the job
    assert (run / "eval.json").is_file() and manifest_kind(run) == "run"
    assert sorted(p.name for p in run.parent.iterdir()) == ["calc"]  # the staged job went too
