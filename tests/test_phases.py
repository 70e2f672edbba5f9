"""The experiment's phases around an RL program of its own: prepare (eval, warm start, eval, saved model) and
finish (eval of the trained checkpoint, paired tests, report)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec import dump_spec, load_spec, spec_hash
from agentbridge.training.phases import WARM_MODEL, main

SMALL = ["algorithm.warm_start.demos=64", "algorithm.warm_start.max_steps=4", "algorithm.warm_start.target=null",
         "algorithm.warm_start.group_floor=null", "algorithm.warm_start.control=false", "data.eval.size=24"]
# each backend's launch.sh runs the whole experiment around its stand-in trainer: smaller still (five of them)
LAUNCH_EVAL, LAUNCH_WARM_STEPS = 8, 2
LAUNCH_SMALL = [*SMALL[:1], f"algorithm.warm_start.max_steps={LAUNCH_WARM_STEPS}", *SMALL[2:-1],
                f"data.eval.size={LAUNCH_EVAL}"]


def test_prepare_then_finish_write_every_arm(tmp_path: Path) -> None:
    job, run = tmp_path / "job", tmp_path / "run"
    job.mkdir()
    (job / "spec.yaml").write_text(dump_spec(load_spec("examples/calculator.yaml", SMALL)))
    (job / "manifest.json").write_text(json.dumps({"backend": "verl", "versions": {"verl": "0.9.1"}}))

    assert main(["prepare", str(job), "--run-dir", str(run), "--quiet"]) == 0
    manifest = json.loads((run / "manifest.json").read_text())  # every backend's run has one
    assert manifest["kind"] == "run" and manifest["backend"] == "verl" and manifest["versions"]["verl"] == "0.9.1"
    assert manifest["spec_hash"] == spec_hash(load_spec(job / "spec.yaml"))
    assert len(manifest["chat_template_hash"]) == 64
    warm = json.loads((run / "warm_start.json").read_text())
    assert warm["steps"] == 4 and warm["stopped"] == "max_steps"
    assert (run / WARM_MODEL / "config.json").is_file() and (run / WARM_MODEL / "tokenizer_config.json").is_file()
    assert set(json.loads((run / "eval.json").read_text())) == {"before_training", "before_rl", "paired"}

    # the warm-started model stands in for a trained checkpoint: greedy eval of the same weights gives the same scores
    assert main(["finish", str(job), "--run-dir", str(run), "--model", str(run / WARM_MODEL), "--quiet"]) == 0
    evals = json.loads((run / "eval.json").read_text())
    assert evals["after_rl"]["n"] == evals["before_rl"]["n"] == 24
    assert evals["after_rl"]["mean"] == evals["before_rl"]["mean"]
    assert evals["paired"]["rl_vs_warm_start_p"] == 1.0 and evals["paired"]["rl_vs_control_p"] is None
    scores = [json.loads(x) for x in (run / "eval_scores.jsonl").read_text().splitlines()]
    assert all(r["after_rl"] == r["before_rl"] for r in scores) and len(scores) == 24
    assert "| after_rl |" in (run / "report.md").read_text()
    assert "2-step" in evals["after_rl"].get("by_group", {}) and "2-step" in evals["before_rl"].get("by_group", {})


def test_finish_without_a_checkpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "spec.yaml").write_text(dump_spec(load_spec("examples/calculator.yaml", SMALL)))
    assert main(["finish", str(job), "--run-dir", str(tmp_path / "run"), "--model", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'nothing'}: no trained checkpoint here (no config.json)"]


TRAINERS = {"verl": "verl.trainer.main_ppo", "openrlhf": "openrlhf.cli.train_ppo_ray"}
ENTRY_TRAINERS = ("rlinf", "roll")  # the job's entry.py, run with $PYTHON; slime: $SLIME_DIR/train.py
BACKENDS = (*TRAINERS, *ENTRY_TRAINERS, "slime")
# a plugin that records every row its on_metrics hook receives (AGENTBRIDGE_PLUGINS opts the launch's processes in)
RECORDER = """import json, os

from agentbridge import hookimpl


@hookimpl
def on_metrics(step, metrics, run):
    with open(os.environ["STANDIN_ON_METRICS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "metrics": metrics}) + "\\n")
"""


def launch(tmp: Path, backend: str) -> dict[str, Path | dict[str, str]]:
    """The calculator compiled for ``backend`` and its launch.sh run: prepare (eval, warm start, eval) → the trainer
    (a stand-in: it needs GPUs), started from the warm-started model → finish (eval of the model it saved)."""
    import subprocess
    import sys

    job, run, record = tmp / "job", tmp / "run", tmp / "argv.json"
    sets = [f"--set={s}" for s in LAUNCH_SMALL]
    compiled = subprocess.run([sys.executable, "-m", "agentbridge.cli", "compile", "examples/calculator.yaml",
                               "--backend", backend, "-o", str(job), *sets], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    python = tmp / "python"  # this interpreter, except for the trainer's program
    standin = Path(__file__).with_name("trainer_standin.py")
    trainer = (f'if [ "${{1:-}} ${{2:-}}" = "-m {TRAINERS[backend]}" ]; then shift 2; '
               f'exec {sys.executable} {standin} {backend} "$@"; fi\n' if backend in TRAINERS else
               f'case "${{1:-}}" in */entry.py) shift; exec {sys.executable} {standin} {backend} "$@" ;; esac\n'
               if backend in ENTRY_TRAINERS else "")
    python.write_text(f'#!/usr/bin/env bash\n{trainer}exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    slime_dir = tmp / "slime"  # slime's checkout: its train.py is the stand-in
    (slime_dir / "train.py").parent.mkdir()
    (slime_dir / "train.py").write_text(f"import runpy, sys\nsys.argv = [{str(standin)!r}, 'slime', *sys.argv[1:]]\n"
                                        f"runpy.run_path({str(standin)!r}, run_name='__main__')\n")
    (tmp / "plugin").mkdir()
    (tmp / "plugin" / "standin_recorder.py").write_text(RECORDER)
    env = {**os.environ, "PYTHON": str(python), "RUN_DIR": str(run), "OUT": str(run), "STANDIN_RECORD": str(record),
           "SLIME_DIR": str(slime_dir), "STANDIN_ON_METRICS": str(tmp / "on_metrics.jsonl"),
           "AGENTBRIDGE_PLUGINS": "standin_recorder",
           "PYTHONPATH": os.pathsep.join([str(tmp / "plugin"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    launched = subprocess.run(["bash", str(job / "launch.sh")], env=env, capture_output=True, text=True)
    assert launched.returncode == 0, launched.stderr[-2000:]
    return {"job": job, "run": run, "record": record, "env": env, "on_metrics": tmp / "on_metrics.jsonl"}


class Launches(dict[str, dict[str, Any]]):
    """Each backend's launch, run when a test first asks for it."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, backend: str) -> dict[str, Any]:
        self[backend] = launch(self.factory.mktemp(backend), backend)
        return self[backend]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launches:
    return Launches(tmp_path_factory)


# each stand-in's logged steps, as the run's metrics.jsonl rows: (steps, reward/mean of the first, another name)
STEP_ROWS = {"rlinf": ([1, 2], 0.25, ("rlinf/loss", -0.02)), "roll": ([1, 2, 3], 0.3, ("roll/loss", 0.01)),
             "slime": ([1, 2], 0.35, ("slime/loss", 0.03))}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_launch_script_runs_the_arms_around_the_backends_trainer(launched: dict[str, dict[str, Any]], backend: str,
                                                                 tmp_path: Path) -> None:
    """The compiled job's launch.sh: the arms around the backend's trainer, which starts from the warm-started
    model; the trainer's own step metrics become the run's metrics.jsonl, each row handed to on_metrics."""
    import subprocess

    job, run, record, env = (launched[backend][k] for k in ("job", "run", "record", "env"))
    args = json.loads(record.read_text())
    assert f"{run / WARM_MODEL}" in " ".join(args)  # the trainer started from the warm-started model
    evals = json.loads((run / "eval.json").read_text())
    assert {"before_training", "before_rl", "after_rl"} <= set(evals)
    assert evals["after_rl"]["n"] == LAUNCH_EVAL and evals["after_rl"]["mean"] == evals["before_rl"]["mean"]
    assert json.loads((run / "warm_start.json").read_text())["steps"] == LAUNCH_WARM_STEPS
    assert "| after_rl |" in (run / "report.md").read_text()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    if backend == "openrlhf":  # after the trainer: its TensorBoard scalars as the run's metrics.jsonl
        assert [r["step"] for r in rows] == [1, 2] and rows[0]["reward/mean"] == 0.5 and rows[0]["time/step_s"] == 4.0
        assert rows[0]["openrlhf/loss"] == pytest.approx(-0.01) and rows[0]["episode/response_tokens"] == 30.0
        assert "2 RL steps, 4.00 s/step on average." in (run / "report.md").read_text()  # converted before finish
    elif backend == "verl":  # veRL's file logger
        assert [r["step"] for r in rows] == [1, 2, 3] and rows[0]["reward/mean"] == pytest.approx(0.5)
        assert rows[0]["throughput/tokens_per_s"] == 500.0 and rows[0]["verl/kl"] == 0.002
    else:  # RLinf's, ROLL's and slime's TensorBoard scalars
        steps, reward, (name, value) = STEP_ROWS[backend]
        assert [r["step"] for r in rows] == steps and rows[0]["reward/mean"] == pytest.approx(reward)
        assert rows[0][name] == pytest.approx(value) and rows[0]["time/step_s"] > 0
        assert f"{len(steps)} RL steps" in (run / "report.md").read_text()  # converted before finish
    seen = [json.loads(x) for x in launched[backend]["on_metrics"].read_text().splitlines()]
    assert [s["metrics"] for s in seen if s["metrics"] in rows] == rows  # the plugin's hook got each row, in order

    alone = tmp_path / "alone"  # AGENTBRIDGE_PHASES=off: the trainer alone, from the spec's model
    env = {**env, "RUN_DIR": str(alone), "OUT": str(alone), "AGENTBRIDGE_PHASES": "off"}
    assert subprocess.run(["bash", str(job / "launch.sh")], env=env, capture_output=True).returncode == 0
    assert WARM_MODEL not in record.read_text() and not (alone / "eval.json").exists()
    assert (alone / "metrics.jsonl").is_file()


def test_one_report_draws_every_backends_run(launched: dict[str, dict[str, Any]], tmp_path: Path,
                                            browser: Any) -> None:
    """`agentbridge report` of the veRL and OpenRLHF runs above (their CPU path: the launch script, the arms, a
    stand-in trainer) and a TRL training run: one line per run in the curves, one row per run in the tables."""
    from click.testing import CliRunner

    from agentbridge.cli import main as cli
    from agentbridge.testing import short_training_run

    trl = tmp_path / "trl"
    short_training_run("examples/calculator.yaml", trl, ["algorithm.warm_start=null", "data.eval.size=8"])
    runs = [str(launched["verl"]["run"]), str(launched["openrlhf"]["run"]), str(trl)]
    result = CliRunner().invoke(cli, ["report", *runs, "-o", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    browser.get((tmp_path / "report" / "report.html").as_uri())
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.TAG_NAME, "tr")
    backends = sorted(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows[1:])
    assert backends == ["openrlhf", "trl", "verl"]
    images = browser.find_elements(By.TAG_NAME, "img")
    assert images and all(browser.execute_script("return arguments[0].naturalWidth", i) > 0 for i in images)
    captions = [c.text for c in browser.find_elements(By.TAG_NAME, "figcaption")]
    assert any("reward" in c for c in captions) and any("wall" in c for c in captions), captions
