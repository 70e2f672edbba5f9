"""Runners (this interpreter, another interpreter) and backend environments (`agentbridge backends setup`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge import backend_envs
from agentbridge.backend_envs import EnvironmentRecipe
from agentbridge.backends import backend_python, known_capabilities, verification
from agentbridge.cli import main
from agentbridge.command_runners import InterpreterRunner, LocalRunner, RayJobRunner, runner_for


@pytest.mark.parametrize("runner", [LocalRunner(), InterpreterRunner(sys.executable)], ids=["local", "interpreter"])
def test_runners_run_agentbridge_commands(runner: LocalRunner | InterpreterRunner) -> None:
    ok = runner.run(["validate", "examples/calculator.yaml"])
    assert ok.ok and ok.stdout.startswith("ok: examples/calculator.yaml (calculator;")
    bad = runner.run(["validate", "examples/calculator.yaml", "--set", "agent.max_turns=0"])
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "error: --set agent.max_turns=0: agent.max_turns: Input should be greater than 0"]


def test_runner_for_needs_an_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTBRIDGE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert isinstance(runner_for("local"), LocalRunner)
    with pytest.raises(ValueError, match="run `agentbridge backends setup nobackend`"):
        runner_for("env", backend="nobackend", module="no_such_module")
    ray = runner_for("ray", backend="trl", module="trl")  # TRL imports here: this interpreter
    assert isinstance(ray, RayJobRunner) and ray.python == sys.executable
    assert json.loads(ray.submit_command(["check", "."])[ray.submit_command(["check", "."]).index(
        "--runtime-env-json") + 1])["env_vars"]["HF_HUB_OFFLINE"] == "1"


def test_recipes_pin_each_backend() -> None:
    verl = backend_envs.recipe("verl", cpu=True, plugins=["agentbridge-math"])
    assert verl.steps[0] == ["torch==2.13.0"] and verl.steps[1][0] == "torch==2.13.0"
    joined = " ".join(verl.steps[1])
    assert "adapters/verl[backend]" in joined and "[hf]" not in joined  # veRL pins an older transformers
    assert "plugins/math" in joined and "plugins/search" not in joined
    openrlhf = backend_envs.recipe("openrlhf", cpu=True, plugins=[])
    assert ["--no-deps", "openrlhf==0.11.2"] in openrlhf.steps and "adapters/openrlhf[cpu]" in " ".join(
        openrlhf.steps[2])
    gpu = backend_envs.recipe("openrlhf", cpu=False, plugins=[])
    assert "openrlhf[vllm]==0.11.2" in gpu.steps[0] and "torch==2.13.0" not in " ".join(gpu.steps[0])
    verl_gpu = backend_envs.recipe("verl", cpu=False, plugins=["agentbridge-math"])
    assert verl.digest() != verl_gpu.digest()
    # veRL's actor uses flash_attention_2: flash-attn is built after torch is in, against it
    assert "verl[vllm]==0.9.1" in verl_gpu.steps[0] and verl_gpu.steps[1] == ["--no-build-isolation",
                                                                               "flash-attn==2.8.3"]
    with pytest.raises(ValueError, match="no recipe for 'nope'"):
        backend_envs.recipe("nope", cpu=True)


def test_setup_creates_checks_and_records_an_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real venv with a small recipe (agentbridge itself, no dependencies): created, checked, recorded, reused."""
    root = str(Path(__file__).resolve().parents[1])
    small = backend_envs.Recipe("tiny", "pluggy", "cpu", [["--no-deps", "-e", root, "pluggy"]])
    monkeypatch.setattr(backend_envs, "recipe", lambda *a, **k: small)
    monkeypatch.setenv("AGENTBRIDGE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    python = backend_envs.setup("tiny", tmp_path / "venv", cpu=True, say=said.append)
    assert python.is_file() and any("step 1/1" in line for line in said)
    saved = json.loads((tmp_path / "home" / "environments.json").read_text())["tiny"]
    assert saved["python"] == str(python.absolute()) and saved["recipe"] == small.digest()
    assert backend_python("tiny", "no_such_module_here") == str(python.absolute())
    said.clear()
    backend_envs.setup("tiny", tmp_path / "venv", cpu=True, say=said.append)
    assert "is up to date" in said[0]


def test_setup_cli_dry_run_and_unknown_backend() -> None:
    result = CliRunner().invoke(main, ["backends", "setup", "verl", "--dry-run"])
    assert result.exit_code == 0 and result.output.splitlines()[0] == "pip install torch==2.13.0"
    bad = CliRunner().invoke(main, ["backends", "setup", "nope"])
    with_recipe = [n for n, (_, r) in backend_envs.declared().items() if r is not None and not r.source_only]
    assert bad.exit_code == 1 and bad.output.strip() == (
        f"error: backends setup: no recipe for 'nope' (no backend 'nope' is installed here; installed backends with "
        f"one: {', '.join(with_recipe)})")


def test_capabilities_and_recipe_come_from_the_adapter(mini_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The core holds no table of backends: what ``known_capabilities``, ``verification`` and ``backends setup`` say
    of one is what its adapter declares (here the example backend package's ``capability_fields`` and
    ``environment``)."""
    assert known_capabilities()["mini"] == mini_backend.capabilities()
    assert known_capabilities()["mini"].notes == ["collects batches only: no weight updates"]
    assert verification(known_capabilities()["mini"])[0] == "not stated"
    cpu = backend_envs.recipe("mini", cpu=True, plugins=[])
    assert (cpu.module, cpu.steps[0]) == ("agentbridge_mini", ["torch==2.13.0"])
    assert any(a.startswith("agentbridge-mini") or a.endswith("backend-package") for a in cpu.steps[1])
    kind = type(mini_backend)
    monkeypatch.setattr(kind, "capability_fields", {"verified_in_ci": True})
    monkeypatch.setattr(kind, "environment", EnvironmentRecipe(
        adapter="agentbridge-mini", extra=None, gpu=("mini-engine==1.0",), gpu_post=(("--no-deps", "mini-ops"),)))
    assert verification(known_capabilities()["mini"])[0] == "this CI"
    gpu = backend_envs.recipe("mini", cpu=False, plugins=[])
    assert gpu.steps[0][-1] == "mini-engine==1.0" and gpu.steps[1] == ["--no-deps", "mini-ops"]
    monkeypatch.setattr(kind, "environment", EnvironmentRecipe(adapter="agentbridge-mini", source_only="build it"))
    with pytest.raises(ValueError, match=r"^backends setup mini: build it$"):
        backend_envs.recipe("mini", cpu=True)
    monkeypatch.setattr(kind, "environment", None)
    with pytest.raises(ValueError, match=r"no recipe for 'mini' \(its adapter declares none; "):
        backend_envs.recipe("mini", cpu=True)
    monkeypatch.setattr(backend_envs, "declared", dict)  # nothing installed
    with pytest.raises(ValueError, match=r"no backend 'trl' is installed here; no installed backend declares one\)$"):
        backend_envs.recipe("trl", cpu=True)


def test_backends_lists_where_each_environment_is() -> None:
    result = CliRunner().invoke(main, ["backends"])
    assert result.exit_code == 0
    trl_row = next(line for line in result.output.splitlines() if line.startswith("│ trl"))
    assert "this one" in trl_row
