"""The compile pipeline (get_backend, compile_job) and the adapter kit, through the example third-party backend
(examples/backend-package, written with the kit: the ``mini_backend`` fixture)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge import adapter as kit
from agentbridge.backends import Backend, BackendNotInstalled, Job, compile_job, get_backend
from agentbridge.spec import Spec, SpecError, load_spec

CALC = "examples/calculator.yaml"
SMALL = ["data.train.size=4", "data.eval.size=2", "data.dev.size=2", "algorithm.name=grpo"]  # mini runs grpo
# one step of one task, two episodes: what the mini backend collects when it trains
ONE_STEP = ["algorithm.steps=1", "algorithm.batch_size=1", "algorithm.group_size=2"]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every spec parse in this process from now on (``load_spec`` and ``parse_spec`` both end there)."""
    import agentbridge.spec.load as load

    seen: list[str] = []
    real = load.parse_spec

    def counting(data: Any, source: str = "<spec>", *args: Any, **kwargs: Any) -> Spec:
        seen.append(source)
        return real(data, source, *args, **kwargs)

    monkeypatch.setattr(load, "parse_spec", counting)
    return seen


def test_get_backend_names_what_to_install_or_the_near_miss(mini_backend: Any) -> None:
    assert get_backend("mini") is mini_backend and isinstance(mini_backend, Backend)
    with pytest.raises(BackendNotInstalled) as missing:
        get_backend("nope")
    assert str(missing.value).startswith("unknown backend 'nope'; known: ")
    assert str(missing.value).endswith("; pip install agentbridge-nope") and "\n" not in str(missing.value)
    with pytest.raises(BackendNotInstalled, match=r"^unknown backend 'minii'; did you mean 'mini'\?$"):
        get_backend("minii")


def test_compile_job_writes_the_completed_manifest_once(mini_backend: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[Path] = []
    real = Job.write_manifest
    monkeypatch.setattr(Job, "write_manifest", lambda job: (writes.append(job.path), real(job))[1])
    spec = load_spec(CALC, [*SMALL, "backend.options={use_vllm: false}"])  # TRL's options: noted, not applied
    job = compile_job(spec, mini_backend, tmp_path / "job")
    assert writes == [tmp_path / "job"] and job.spec is spec
    manifest = json.loads((job.path / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(job.manifest))
    assert manifest["backend"] == "mini" and manifest["versions"]["agentbridge-mini"] == "0.1.0"
    assert manifest["files"] == ["data", "launch.sh", "manifest.json", "mini.json", "spec.yaml"]
    assert manifest["tasks"] == {"train": 4, "eval": 2}
    assert len(manifest["chat_template_hash"]) == 64 and manifest["algorithm_differences"] == []
    assert manifest["notes"] == ["backend.options are for backend trl (backend.name): not applied to the mini job"]
    launch = (job.path / "launch.sh").read_text().splitlines()
    assert launch[:3] == ["#!/usr/bin/env bash", "set -euo pipefail", 'JOB="$(cd "$(dirname "$0")" && pwd)"']
    assert (job.path / "launch.sh").stat().st_mode & 0o111
    assert json.loads((job.path / "mini.json").read_text())["policy"] == "model"  # trl's options stay trl's


def test_compile_job_checks_ids_options_and_the_algorithm_before_writing(mini_backend: Any, tmp_path: Path) -> None:
    spec = load_spec(CALC, [*SMALL, "algorithm.name=ppo", "backend.name=mini", "backend.options={turbo: 1}"])
    with pytest.raises(SpecError) as rejected:
        compile_job(spec, mini_backend, tmp_path / "job", source="calc.yaml")
    assert [line.split(";")[0] for line in rejected.value.problems] == [
        "calc.yaml: algorithm.name: mini cannot run 'ppo' (it runs grpo)",
        "calc.yaml: backend.options.turbo: unknown mini option"]
    assert not (tmp_path / "job").exists()


def test_train_parses_the_spec_once(mini_backend: Any, tmp_path: Path, parses: list[str]) -> None:
    from agentbridge.cli import main

    args = ["train", CALC, "--backend", "mini", "-o", str(tmp_path / "run")]
    sets = [*SMALL, *ONE_STEP, "backend.name=mini", "backend.options={policy: expert}"]
    result = CliRunner().invoke(main, [*args, *(f"--set={s}" for s in sets)])
    assert result.exit_code == 0, result.output
    assert parses == [CALC]
    # the backend ran in its own process, with this interpreter: one batch of two episodes
    batch = (tmp_path / "run" / "batches" / "step_00000.jsonl").read_text().splitlines()
    assert len(batch) == 2 and all(json.loads(row)["reward"] > 1.0 for row in batch)  # the expert solves it


def test_a_validator_elsewhere_reports_problems_and_skipped_checks(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stub_validator.py").write_text(
        "import sys\n"
        "from agentbridge import adapter as kit\n"
        "from agentbridge.backends import Problem\n\n"
        "def validate_job(job_dir, skipped, *, spec=None):\n"
        "    skipped.append('images: no processor here')\n"
        "    return [Problem('launch.sh', f'{job_dir.name} is broken')]\n\n"
        "sys.exit(kit.validator_main(validate_job, 'python -m stub_validator'))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    report = kit.validate_in(sys.executable, "stub_validator", Job(backend="stub", path=tmp_path / "job"))
    assert [str(p) for p in report.problems] == ["launch.sh: job is broken"] and not report.ok
    assert report.notes() == ["skipped: images: no processor here"]
    broken = kit.validate_in(sys.executable, "no_such_validator", Job(backend="stub", path=tmp_path / "job"))
    assert [p.where for p in broken.problems] == ["stub"] and "the validator failed in" in broken.problems[0].message
