"""Held-out evaluation sharded over the trainer's devices reads as one evaluation: the same per-task scores, in task
order, as on one device (CPU here: ``AGENTBRIDGE_EVAL_DEVICES=cpu,cpu`` gives two shards, the second in a process of
its own that loads the model as a GPU's shard would)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentbridge.plugins import PLUGINS_ENV, enable_plugin, get_plugins
from agentbridge.spec import dump_spec, load_spec
from agentbridge.training.evaluate import EvalResult
from agentbridge.training.phases import main
from agentbridge.training.sharded_eval import DEVICES_ENV, eval_devices, merge, shard

# a reward that differs from task to task for an untrained model (the calculator's exact answer is 0 everywhere
# before training, so it would not show a shard put back in the wrong place): the parity of the prompt's length (the
# task) plus the first token the model wrote (the weights: another model's first token would move it)
PARITY = """from agentbridge import hookimpl


@hookimpl
def register_rewards(register):
    register("shardtest/parity",
             lambda trajectory, task: float((len(trajectory.prompt_ids) + trajectory.response_ids[0]) % 2))
"""
SETS = ["algorithm.warm_start=null", "data.eval.size=10", "agent.max_turns=2", "agent.max_tokens_per_turn=24",
        "reward=[{id: shardtest/parity, weight: 1.0}, {id: core/format, weight: 0.1}]"]


def test_shards_interleave_back_into_task_order() -> None:
    ids = [f"t{i}" for i in range(7)]
    parts = [EvalResult(metric="m", task_ids=shard(ids, i, 3), scores=[float(int(t[1:]) % 2) for t in shard(ids, i, 3)],
                        finish={"done": len(shard(ids, i, 3)), "length": 0}, seconds=float(i),
                        groups=[f"g{int(t[1:]) % 2}" for t in shard(ids, i, 3)],
                        components={"c": [int(t[1:]) / 10 for t in shard(ids, i, 3)]}) for i in range(3)]
    whole = merge(parts)
    assert whole.task_ids == ids and whole.scores == [float(i % 2) for i in range(7)]
    assert whole.groups == [f"g{i % 2}" for i in range(7)] and whole.components == {"c": [i / 10 for i in range(7)]}
    assert whole.finish == {"done": 7, "length": 0} and whole.seconds == 2.0


def test_devices_come_from_the_environment_else_this_nodes_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICES_ENV, "cuda:0, cuda:3")
    assert eval_devices(8) == ["cuda:0", "cuda:3"]
    monkeypatch.delenv(DEVICES_ENV)
    assert eval_devices(8) == ["cpu"]  # no GPU here


def test_finish_on_two_shards_scores_every_task_as_on_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "shardtest_parity.py").write_text(PARITY)
    monkeypatch.syspath_prepend(str(plugin))  # the shard's process (spawned) gets this process's sys.path
    monkeypatch.setenv(PLUGINS_ENV, os.environ.get(PLUGINS_ENV, ""))  # restored after the test
    enable_plugin("shardtest_parity")  # here (the process-wide manager may be built already) and in the shard's process
    try:
        compare_shards(tmp_path, monkeypatch, capsys)
    finally:
        get_plugins().unregister("shardtest_parity")


def compare_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from agentbridge.models import load_model, load_tokenizer

    spec = load_spec("examples/calculator.yaml", SETS)
    model_dir = tmp_path / "model"  # the untrained model, as a checkpoint the trainer saved
    load_model(spec.model.path, seed=spec.seed).save_pretrained(model_dir)
    load_tokenizer(spec.model.path).save_pretrained(model_dir)
    job = tmp_path / "job"
    job.mkdir()
    (job / "spec.yaml").write_text(dump_spec(spec))

    runs = {}
    for devices in ("cpu", "cpu,cpu"):  # prepare (before_training, from the spec's model) and finish (the checkpoint)
        monkeypatch.setenv(DEVICES_ENV, devices)
        run = tmp_path / f"run-{devices}"
        assert main(["prepare", str(job), "--run-dir", str(run)]) == 0
        assert main(["finish", str(job), "--run-dir", str(run), "--model", str(model_dir)]) == 0
        runs[devices] = run
    printed = capsys.readouterr()
    assert (printed.out + printed.err).count("2 shards: cpu, cpu") == 2

    one, two = ([json.loads(x) for x in (runs[d] / "eval_scores.jsonl").read_text().splitlines()]
                for d in ("cpu", "cpu,cpu"))
    assert one == two and len(one) == 10
    for arm in ("before_training", "after_rl"):  # scores that differ by task: the order is checked
        assert 0 < sum(r[arm] for r in one) < 10, one
    evals = [json.loads((runs[d] / "eval.json").read_text()) for d in ("cpu", "cpu,cpu")]
    for arms in evals:
        for arm in ("before_training", "before_rl", "after_rl"):
            arms[arm].pop("seconds")
    assert evals[0] == evals[1]
