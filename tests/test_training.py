"""The backend-neutral training pieces: statistics, the prefix-shared SFT loss, the resumable SFT loop, the warm
start's stopping rule, the arms' eval.json and the report's verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec.schema import WarmStartSpec
from agentbridge.training.evaluate import EvalResult
from agentbridge.training.experiment import load_evals, write_evals
from agentbridge.training.report import verdicts, write_report
from agentbridge.training.stats import mcnemar_exact, wilcoxon_paired, wilson_interval
from agentbridge.training.warm_start import SFTRun, continue_sft, prefix_shared_loss, warm_start


def test_wilson_interval_matches_the_closed_form() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(35, 100)
    assert (low, high) == (pytest.approx(0.2636, abs=1e-4), pytest.approx(0.4474, abs=1e-4))
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_mcnemar_exact_counts_discordant_pairs() -> None:
    a, b = [1.0] * 10 + [0.0] * 5 + [1.0] * 5, [0.0] * 10 + [0.0] * 5 + [1.0] * 5
    test = mcnemar_exact(a, b)
    assert (test["a_only"], test["b_only"]) == (10, 0) and test["p"] == pytest.approx(2 * 0.5**10)
    assert mcnemar_exact([1.0, 0.0], [1.0, 0.0])["p"] == 1.0
    assert mcnemar_exact(a, list(reversed(a)))["p"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same tasks"):
        mcnemar_exact([1.0], [1.0, 0.0])


def _tiny_lm(seed: int = 0) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, pad_token_id=0)
    return Qwen2ForCausalLM(config)


def _rows(n: int, prefix: int = 12) -> list[dict[str, list[int]]]:
    import random

    rng = random.Random(0)
    head = [rng.randrange(3, 64) for _ in range(prefix)]
    rows = []
    for _ in range(n):
        tail = [rng.randrange(3, 64) for _ in range(rng.randint(4, 9))]
        labels = [-100] * (prefix + 2) + tail[2:]
        rows.append({"input_ids": head + tail, "labels": labels})
    return rows


def test_prefix_shared_loss_equals_the_plain_forward() -> None:
    """Loss and gradients equal a plain causal-LM forward over the padded batch."""
    import torch

    model = _tiny_lm()
    run = SFTRun(model, _rows(6), lr=1e-3, batch_size=6, pad_id=0)
    batch = run._batch()
    shared = prefix_shared_loss(model, batch)
    shared.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    plain = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), batch["labels"][:, 1:].reshape(-1),
                                              ignore_index=-100)
    plain.backward()
    assert shared.item() == pytest.approx(plain.item(), rel=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-6), name


def test_sft_run_restores_weights_optimizer_and_data_position() -> None:
    run = SFTRun(_tiny_lm(), _rows(20), lr=1e-2, batch_size=4, pad_id=0, seed=3)
    for _ in range(3):
        run.train_step()
    snap = run.snapshot()
    after = [run.train_step() for _ in range(4)]
    run.restore(snap)
    assert [run.train_step() for _ in range(4)] == pytest.approx(after, rel=1e-6)
    assert run.step == 7


def _check(success: float, groups: dict[str, float] | None = None) -> EvalResult:
    """A dev check of 20 tasks per group with the given success rates."""
    groups = groups or {"": success}
    scores = [float(i < round(rate * 20)) for rate in groups.values() for i in range(20)]
    return EvalResult(metric="m", task_ids=[str(i) for i in range(len(scores))], scores=scores,
                      groups=[g for g in groups for _ in range(20)])


def test_warm_start_stops_on_dev_target_or_caps() -> None:
    run = SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0)
    checks = iter(_check(v) for v in [0.0, 0.05, 0.1, 0.2, 0.4, 0.9])
    ws = WarmStartSpec(target=0.35, dev_every=10, max_steps=100)
    result = warm_start(run, ws, dev=lambda: next(checks))
    assert (result.stopped, result.steps) == ("target", 34)  # every 10 steps, every 2 once dev >= 0.35 / 4
    assert [d["step"] for d in result.dev] == [10, 20, 30, 32, 34] and result.dev[-1]["success"] == 0.4
    run = SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0)
    checks = iter(_check(v) for v in [0.0, 0.1, 0.4, 0.9])
    result = warm_start(run, WarmStartSpec(target=0.35, dev_every=2, max_steps=50), dev=lambda: next(checks))
    assert (result.stopped, [d["step"] for d in result.dev]) == ("target", [2, 4, 5])
    result = warm_start(SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0),
                        WarmStartSpec(target=0.5, dev_every=2, max_steps=5), dev=lambda: _check(0.0))
    assert (result.stopped, result.steps) == ("max_steps", 5) and len(result.dev) == 3  # steps 2, 4 and the last
    result = warm_start(SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0),
                        WarmStartSpec(epochs=2, batch_size=4))
    assert (result.stopped, result.steps, result.dev) == ("max_steps", 8, [])


def test_the_control_trains_its_step_budget_or_for_the_wall_time() -> None:
    run = SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0)
    seen: list[int] = []
    assert continue_sft(run, 3600.0, on_progress=lambda n, loss: seen.append(n), steps=3) == 3  # steps win over time
    assert seen == [1, 2, 3] and run.step == 3
    assert continue_sft(run, 0.0) == 0  # no RL time: no control steps
    assert continue_sft(run, 0.5) >= 1


def test_warm_start_group_floor_waits_for_every_task_group() -> None:
    checks = iter([_check(0, {"1-step": 0.9, "2-step": 0.0}), _check(0, {"1-step": 0.9, "2-step": 0.1}),
                   _check(0, {"1-step": 0.95, "2-step": 0.2})])
    ws = WarmStartSpec(target=0.35, group_floor=0.15, dev_every=10, max_steps=50)
    result = warm_start(SFTRun(_tiny_lm(), _rows(16), lr=1e-3, batch_size=4, pad_id=0), ws, dev=lambda: next(checks))
    assert (result.stopped, [d["step"] for d in result.dev]) == ("target", [10, 12, 14])
    assert result.dev[0]["success"] == 0.45 and result.dev[-1]["groups"] == {"1-step": 0.95, "2-step": 0.2}
    assert _check(0.5, {"a": 0.5, "b": 0.5}).summary()["by_group"] == {"a": 0.5, "b": 0.5}
    assert "by_group" not in _check(0.5).summary()


def _arm(scores: list[float]) -> EvalResult:
    return EvalResult(metric="math/exact_answer", task_ids=[f"t{i}" for i in range(len(scores))], scores=scores)


def test_eval_json_holds_every_arm_and_the_paired_tests(tmp_path: Path) -> None:
    warm = [1.0] * 30 + [0.0] * 70
    rl = [1.0] * 30 + [1.0] * 12 + [0.0] * 58          # 12 more solved, none lost
    control = [1.0] * 30 + [1.0] * 20 + [0.0] * 50     # the control solves 8 more than RL
    evals = {"before_training": _arm([0.0] * 100), "before_rl": _arm(warm), "after_rl": _arm(rl),
             "sft_control": _arm(control)}
    summary = write_evals(tmp_path, evals)
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    for arm in ("before_training", "before_rl", "after_rl", "sft_control"):
        assert {"mean", "n", "ci95_low", "ci95_high"} <= set(saved[arm]) and saved[arm]["n"] == 100
    assert saved["after_rl"]["mean"] == 0.42
    assert saved["paired"]["rl_vs_warm_start_p"] == pytest.approx(2 * 0.5**12)
    assert saved["paired"]["rl_vs_control_p"] == pytest.approx(2 * 0.5**8)
    rows = [json.loads(x) for x in (tmp_path / "eval_scores.jsonl").read_text().splitlines()]
    assert len(rows) == 100 and rows[40] == {"task_id": "t40", "before_training": 0.0, "before_rl": 0.0,
                                              "after_rl": 1.0, "sft_control": 1.0}
    said = " ".join(verdicts(saved))
    assert "+12.0 points over the warm start" in said and "significant at 0.01" in said
    assert "the SFT-only control won" in said
    report = write_report(tmp_path).read_text()
    assert "| sft_control | 0.500 |" in report and (tmp_path / "eval.png").read_bytes()[:4] == b"\x89PNG"
    assert "Success per task group" not in report  # these tasks have no groups


def test_the_other_reward_components_are_kept_per_arm_and_compared(tmp_path: Path) -> None:
    """Graded components (supporting-passage recall) get a mean per arm, a Wilcoxon test of RL against the warm
    start, a sentence in the report, and survive a resumed run's read-back."""
    from agentbridge.env import Task

    warm_support = [0.5] * 60 + [1.0] * 40
    rl_support = [1.0] * 50 + [0.5] * 10 + [1.0] * 40    # 50 tasks found their second passage after RL

    def arm(scores: list[float], support: list[float]) -> EvalResult:
        return EvalResult(metric="search/exact_match", task_ids=[f"t{i}" for i in range(100)], scores=scores,
                          components={"search/support": support})

    evals = {"before_rl": arm([0.0] * 100, warm_support), "after_rl": arm([0.0] * 100, rl_support)}
    summary = write_evals(tmp_path, evals)
    assert summary["after_rl"]["components"] == {"search/support": pytest.approx(0.95)}
    test = summary["paired"]["components"]["rl_vs_warm_start"]["search/support"]
    assert test["mean_diff"] == pytest.approx(0.25) and test["differing"] == 50 and test["p"] < 1e-9
    assert summary["paired"]["rl_vs_warm_start_p"] == 1.0       # exact match did not move
    said = " ".join(verdicts(json.loads((tmp_path / "eval.json").read_text())))
    assert "RL changed held-out search/support by +0.250" in said and "significant at 0.01" in said
    back = load_evals(tmp_path, [Task(id=f"t{i}", prompt="q") for i in range(100)])
    assert set(back) == {"before_rl", "after_rl"} and back["after_rl"].components["search/support"] == rl_support
    assert wilcoxon_paired([1.0, 0.5], [1.0, 0.5]) == {"mean_diff": 0.0, "differing": 0.0, "p": 1.0}
    with pytest.raises(ValueError, match="same tasks"):
        wilcoxon_paired([1.0], [1.0, 0.0])


def test_report_shows_success_per_task_group(tmp_path: Path) -> None:
    def grouped(scores: list[float]) -> EvalResult:
        return EvalResult(metric="m", task_ids=[f"t{i}" for i in range(4)], scores=scores,
                          groups=["sums", "sums", "products", "products"])

    write_evals(tmp_path, {"before_rl": grouped([0.0, 0.0, 1.0, 1.0]), "after_rl": grouped([1.0, 1.0, 1.0, 0.0])})
    lines = write_report(tmp_path).read_text().splitlines()
    at = lines.index("| arm | products | sums |")
    assert lines[at + 2:at + 4] == ["| before_rl | 1.000 | 0.000 |", "| after_rl | 0.500 | 1.000 |"]


def test_verdict_says_when_no_arm_won() -> None:
    arm = {"mean": 0.4, "n": 10, "ci95_low": 0.1, "ci95_high": 0.7}
    said = verdicts({"before_rl": arm, "after_rl": arm, "sft_control": arm,
                     "paired": {"rl_vs_warm_start_p": 1.0, "rl_vs_control_p": 1.0}})
    assert "not significant" in said[0] and "neither arm won" in said[1]
