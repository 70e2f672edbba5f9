"""The command line: exit codes, one-line errors, no heavy imports, rollout output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers", "trl", "verl", "openrlhf", "vllm", "ray", "deepspeed")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=600)


# validate renders the opening prompt with a builtin or local model's tokenizer (transformers); with a hub id it
# stays light
@pytest.mark.parametrize("argv", [["--help"], ["schema"], ["validate", "examples/calculator.yaml", "--set",
                                                          "model.path=Qwen/Qwen2.5-0.5B-Instruct"]])
def test_light_commands_import_no_torch_or_backend(argv: list[str]) -> None:
    probe = (
        "import sys, json\nfrom agentbridge.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
        f"print(json.dumps({{'code': code, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}, out.stderr


def test_validate_ok_and_bad_ids(tmp_path: Path) -> None:
    ok = cli("validate", "examples/calculator.yaml")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: examples/calculator.yaml")
    bad = cli("validate", "examples/calculator.yaml", "--set", "tools=[calculater]", "--set", "reward.0.id=math/nope")
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert "tools[0]: unknown tool 'calculater'; did you mean 'calculator'?" in lines[0]
    assert "reward[0].id: unknown reward 'math/nope'" in lines[1]
    assert "Traceback" not in bad.stderr


def test_validate_spec_errors_are_one_line_each(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(Path("examples/calculator.yaml").read_text().replace("max_turns: 4", "max_turns: many"))
    res = cli("validate", str(spec))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"error: {spec}:10: agent.max_turns: Input should be a valid "
                                               "integer, unable to parse string as an integer"]


def test_usage_error_exit_2() -> None:
    assert cli("rollout").returncode == 2
    assert cli("rollout", "examples/calculator.yaml", "--policy", "magic").returncode == 2


def test_schema_is_json() -> None:
    res = cli("schema")
    assert json.loads(res.stdout)["title"] == "agentbridge spec"


def test_plugins_lists_builtins_and_math() -> None:
    res = cli("plugins")
    assert res.returncode == 0
    assert "agentbridge.builtins" in res.stdout and "hermes" in res.stdout
    assert "agentbridge-math" in res.stdout and "math/calculator" in res.stdout


def test_rollout_scripted_writes_trajectories(tmp_path: Path) -> None:
    res = cli("rollout", "examples/calculator.yaml", "--policy", "scripted", "-n", "12", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(r["reward_components"]["math/exact_answer"] == 1.0 for r in rows)
    assert all(r["finish_reason"] == "done" for r in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reward/mean"] == pytest.approx(1.1) and summary["finish/done"] == 1.0
    assert "reward/mean" in res.stdout and "finish/done" in res.stdout
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest["spec_hash"]) == 64 and len(manifest["chat_template_hash"]) == 64


def test_rollout_hf_policy_runs_untrained_model(tmp_path: Path) -> None:
    res = cli("rollout", "examples/calculator.yaml", "--policy", "hf", "-n", "4", "-o", str(tmp_path),
              "--set", "agent.max_tokens_per_turn=16", "--set", "agent.max_turns=2")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for r in rows:
        assert r["finish_reason"] in ("done", "length", "max_turns")
        gen = [lp for lp, m in zip(r["logprobs"], r["response_mask"], strict=True) if m == 1]
        assert gen and all(lp <= 0.0 for lp in gen) and any(lp < 0.0 for lp in gen)


def test_compile_prints_what_the_job_does_differently(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    result = CliRunner().invoke(main, ["compile", "examples/calculator.yaml", "--backend", "verl", "-o",
                                       str(tmp_path / "job")])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert any("algorithm.warm_start.control is not run by the veRL job" in n for n in notes), result.output


def test_every_backends_job_manifest_records_what_makes_runs_comparable(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    manifests = {}
    for backend in ("trl", "verl", "openrlhf"):
        result = CliRunner().invoke(main, ["compile", "examples/calculator.yaml", "--backend", backend, "-o",
                                           str(tmp_path / backend)])
        assert result.exit_code == 0, result.output
        manifests[backend] = json.loads((tmp_path / backend / "manifest.json").read_text())
    for backend, m in manifests.items():
        assert m["backend"] == backend and m["seed"] == 0 and m["command"]
        assert m["versions"]["agentbridge"] and m["versions"][f"agentbridge-{backend}"]
        assert f"{backend}_pin" in m["versions"]
    assert len({m["spec_hash"] for m in manifests.values()}) == 1
    hashes = {m["chat_template_hash"] for m in manifests.values()}
    assert len(hashes) == 1 and None not in hashes


def test_a_usage_mistake_is_one_line() -> None:
    """An out-of-range option, a file where a directory goes, a missing argument, an unknown command: one
    ``error:`` line each and exit 2, not click's usage text."""
    import subprocess
    import sys

    for argv in (["rollout", "examples/calculator.yaml", "-n", "999999999"], ["compile", "examples/calculator.yaml",
                 "-o", "README.md"], ["validate"], ["nosuch"]):
        result = subprocess.run([sys.executable, "-m", "agentbridge.cli", *argv], capture_output=True, text=True)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, result.stderr)
