"""The compile pipeline (get_backend, compile_job) and the adapter kit, through a backend written with the kit."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge import adapter_kit as kit
from agentbridge.backends import (
    Backend,
    BackendNotInstalled,
    Capabilities,
    Job,
    Problem,
    Report,
    compile_job,
    get_backend,
)
from agentbridge.hooks import hookimpl
from agentbridge.plugins import get_plugins
from agentbridge.spec import Spec, SpecError, dump_spec, load_spec

CALC = "examples/calculator.yaml"
SMALL = ["data.train.size=4", "data.eval.size=2", "data.dev.size=2"]


class StubBackend:
    """The smallest backend the kit makes: a spec, a launch script that writes the run directory, a manifest."""

    name = "stub"
    module = "json"  # always importable: the backend runs in this interpreter

    def capabilities(self) -> Capabilities:
        return Capabilities(algorithms=["dapo", "grpo"])

    def check(self, spec: Spec) -> list[Problem]:
        return kit.unknown_options(self, spec, ["speed"], "stub")  # the algorithm is left to compile_job

    def compile(self, spec: Spec, out: Path) -> Job:
        out.mkdir(parents=True, exist_ok=True)
        (out / "spec.yaml").write_text(dump_spec(spec))
        kit.write_script(out / "launch.sh", ['mkdir -p "$RUN_DIR"', 'echo "$PYTHON" > "$RUN_DIR/python"'],
                         notes=["a note"])
        note = kit.foreign_note(self, spec, "stub")
        return kit.new_job(self, spec, out, version="0.0.1", tasks={"train": 1}, notes=[note] if note else [])

    def validate(self, job: Job) -> Report:
        problems = self.check(kit.job_spec(job))
        return Report(ok=not problems, problems=problems)

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None) -> Path:
        return kit.launch_job(job, runner, run_dir, self, label="stub")

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        return []


@hookimpl
def register_backends(register: Callable[[Any], None]) -> None:
    register(StubBackend())


@pytest.fixture
def stub() -> Iterator[StubBackend]:
    plugins = get_plugins()
    plugins.register("test-stub-backend", types.SimpleNamespace(register_backends=register_backends))
    yield plugins.backends.get("stub")
    plugins.unregister("test-stub-backend")


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


def test_get_backend_names_what_to_install_or_the_near_miss(stub: StubBackend) -> None:
    assert get_backend("stub") is stub and isinstance(stub, Backend)
    with pytest.raises(BackendNotInstalled) as missing:
        get_backend("nope")
    assert str(missing.value).startswith("unknown backend 'nope'; known: ")
    assert str(missing.value).endswith("; pip install agentbridge-nope") and "\n" not in str(missing.value)
    with pytest.raises(BackendNotInstalled, match=r"^unknown backend 'stubb'; did you mean 'stub'\?$"):
        get_backend("stubb")


def test_compile_job_writes_the_completed_manifest_once(stub: StubBackend, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[Path] = []
    real = Job.write_manifest
    monkeypatch.setattr(Job, "write_manifest", lambda job: (writes.append(job.path), real(job))[1])
    spec = load_spec(CALC, [*SMALL, "backend.options={use_vllm: false}"])  # TRL's options: noted, not applied
    job = compile_job(spec, stub, tmp_path / "job")
    assert writes == [tmp_path / "job"] and job.spec is spec
    manifest = json.loads((job.path / "manifest.json").read_text())
    assert manifest == json.loads(json.dumps(job.manifest))
    assert manifest["backend"] == "stub" and manifest["versions"]["agentbridge-stub"] == "0.0.1"
    assert manifest["files"] == ["launch.sh", "manifest.json", "spec.yaml"] and manifest["tasks"] == {"train": 1}
    assert len(manifest["chat_template_hash"]) == 64 and manifest["algorithm_differences"] == []
    assert manifest["notes"] == ["backend.options are for backend trl (backend.name): not applied to the stub job"]
    launch = (job.path / "launch.sh").read_text().splitlines()
    assert launch[:4] == ["#!/usr/bin/env bash", "set -euo pipefail", 'JOB="$(cd "$(dirname "$0")" && pwd)"',
                          "# NOTE: a note"]
    assert (job.path / "launch.sh").stat().st_mode & 0o111


def test_compile_job_checks_ids_options_and_the_algorithm_before_writing(stub: StubBackend, tmp_path: Path) -> None:
    spec = load_spec(CALC, [*SMALL, "algorithm.name=ppo", "backend.name=stub", "backend.options={turbo: 1}"])
    with pytest.raises(SpecError) as rejected:
        compile_job(spec, stub, tmp_path / "job", source="calc.yaml")
    assert [line.split(";")[0] for line in rejected.value.problems] == [
        "calc.yaml: backend.options.turbo: unknown stub option", "calc.yaml: algorithm.name: stub cannot run 'ppo' "
                                                                 "(it runs dapo, grpo)"]
    assert not (tmp_path / "job").exists()


def test_train_parses_the_spec_once(stub: StubBackend, tmp_path: Path, parses: list[str]) -> None:
    from agentbridge.cli import main

    args = ["train", CALC, "--backend", "stub", "-o", str(tmp_path / "run")]
    result = CliRunner().invoke(main, [*args, *(f"--set={s}" for s in SMALL)])
    assert result.exit_code == 0, result.output
    assert parses == [CALC]
    assert (tmp_path / "run" / "python").read_text().strip() == sys.executable  # the backend's interpreter: this one


def test_a_validator_elsewhere_reports_problems_and_skipped_checks(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stub_validator.py").write_text(
        "import sys\n"
        "from agentbridge import adapter_kit as kit\n"
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
