"""The recipe's KL, IS-correction and rollout-mode knobs on OpenRLHF 0.11.2: each mapped knob reaches OpenRLHF's own
arguments (the compiled launch.sh's argv through OpenRLHF's own parser and post-parse checks), each refused one is
one line naming the backends that can; the pinned KL-in-the-reward difference is what its pin says (the recipe
rows themselves: test_algorithm_conformance_openrlhf.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import IS_GSPO, IS_SEQUENCE_CLIP, IS_SEQUENCE_MASK, OpenRLHFBackend
from agentbridge_openrlhf.validate import job_argv, parse_args, semantics_of

CALC = "examples/calculator.yaml"
ROOT = Path(__file__).resolve().parents[3]
GRPO = ["algorithm.name=grpo", "algorithm.group_size=4"]


def _args(tmp_path: Path, *sets: str) -> Any:
    """OpenRLHF's parsed arguments of the job compiled from the calculator spec with ``sets``."""
    spec = load_spec(CALC, [*GRPO, *sets])
    assert OpenRLHFBackend().check(spec) == [], [str(p) for p in OpenRLHFBackend().check(spec)]
    return parse_args(job_argv(OpenRLHFBackend().compile(spec, tmp_path / "job").path, model="/m"))


@pytest.mark.parametrize(("sets", "want"), [
    (["algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"], {"estimator": "k1", "use_loss": True}),
    (["algorithm.kl_coef=10", "algorithm.kl_estimator=k2"], {"estimator": "k2", "use_loss": True}),
    (["algorithm.kl_coef=0.05", "algorithm.kl_in=reward"], {"estimator": "k3", "use_loss": False}),
    (["algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1"],
     {"estimator": "k1", "use_loss": False}),
    # reinforce_pp's preset is k1 in the reward: kl_in alone keeps its estimator, kl_estimator alone its place
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss"],
     {"estimator": "k1", "use_loss": True}),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"],
     {"estimator": "k2", "use_loss": False}),
    # both null: k3 in the loss on every preset, the job these specs compiled to before the knobs
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05"], {"estimator": "k3", "use_loss": True}),
])
def test_kl_knobs_set_openrlhfs_kl_flags(sets: list[str], want: dict[str, Any], tmp_path: Path) -> None:
    args = _args(tmp_path, *sets)
    assert {"estimator": args.algo.kl.estimator, "use_loss": args.algo.kl.use_loss} == want
    assert args.algo.kl.init_coef == next(float(s.split("=")[1]) for s in sets if s.startswith("algorithm.kl_coef"))


@pytest.mark.parametrize(("sets", "mode"), [
    (["algorithm.is_correction.level=token", "algorithm.is_correction.mode=truncate",
      "algorithm.is_correction.cap=3"], "clip"),
    (["algorithm.is_correction.level=token", "algorithm.is_correction.mode=mask",
      "algorithm.is_correction.cap=3"], "mask"),
])
def test_token_is_correction_sets_openrlhfs_ratio_gate(sets: list[str], mode: str, tmp_path: Path) -> None:
    """Token TIS / ICEPOP: OpenRLHF's ratio gate on the band [0, cap], so clip is min(w, cap) and mask zeroes a token
    above cap; PolicyLoss accepts the combination (it raises on the ones it does not)."""
    from agentbridge_openrlhf.algorithm_probe import policy_loss

    args = _args(tmp_path, *sets)
    adv = args.algo.advantage
    assert (adv.is_correction_level, adv.is_correction_mode, adv.is_correction_gating) == ("token", mode, "ratio")
    assert list(adv.is_correction_threshold) == [0.0, 3.0]
    assert policy_loss(args).is_correction_threshold == [0.0, 3.0]
    assert semantics_of(args)["IS correction"].split(" · ")[0] == \
        ("token truncate, cap 3" if mode == "clip" else "token mask, cap 3")


@pytest.mark.parametrize(("sets", "want"), [
    (["algorithm.rollout.mode=sync"], (False, 1, False, "sync")),
    (["algorithm.rollout.mode=one_step_off"], (True, 1, False, "one_step_off")),
    (["algorithm.rollout.mode=async"], (True, 1, False, "one_step_off")),  # OpenRLHF's default queue: 1
    (["algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=3"], (True, 3, False, "async, max staleness 3")),
    (["algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=2", "algorithm.rollout.partial=true"],
     (True, 2, True, "async, max staleness 2, partial")),
])
def test_rollout_mode_sets_openrlhfs_async_trainer(sets: list[str], want: tuple[Any, ...], tmp_path: Path) -> None:
    """The queue of PPOTrainerAsync is the staleness bound; an async job gives vLLM GPUs of its own (no sleep, which
    OpenRLHF's post-parse check refuses with async)."""
    args = _args(tmp_path, "resources.gpus_per_node=8", *sets)
    t = args.train
    assert (t.async_enable, t.async_queue_size, t.partial_rollout_enable) == want[:3]
    assert semantics_of(args)["rollout mode"].split(" · ")[0] == want[3]
    assert (args.vllm.enable_sleep, args.actor.num_gpus_per_node, args.vllm.num_engines) == \
        ((False, 4, 4) if t.async_enable else (True, 8, 8))


@pytest.mark.parametrize(("sets", "where", "why"), [
    (["algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=truncate"], "algorithm.is_correction",
     IS_SEQUENCE_CLIP),
    (["algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask"], "algorithm.is_correction",
     IS_SEQUENCE_MASK),
    (["algorithm.name=gspo", "algorithm.is_correction.level=token"], "algorithm.is_correction", IS_GSPO),
])
def test_refused_knobs_are_one_line(sets: list[str], where: str, why: str) -> None:
    problems = OpenRLHFBackend().check(load_spec(CALC, [*GRPO, *sets]))
    assert [p.where for p in problems] == [where] and "\n" not in str(problems[0])
    algo = "gspo" if "algorithm.name=gspo" in sets else "grpo"
    key = "_".join(s.rsplit("=", 1)[1] for s in sets if s.startswith("algorithm.is_correction."))
    key = key if "_" in key else f"{key}_truncate"  # the mode left at its default
    assert problems[0].message.startswith(f"openrlhf cannot run {algo} with is_correction {key} ({why}); ")


def test_refusals_name_the_backends_whose_check_accepts_the_knob() -> None:
    """In the core environment (every adapter installed) the refusal names exactly the backends whose own check
    takes the same spec, and not OpenRLHF."""
    python = ROOT / ".venv/bin/python"
    if not python.is_file():
        pytest.skip("no core environment (.venv) beside the OpenRLHF one")
    code = ("import json; from agentbridge.plugins import get_plugins; from agentbridge.spec import load_spec\n"
            f"spec = load_spec({CALC!r}, {[*GRPO, 'algorithm.is_correction.level=sequence']!r})\n"
            "reg = get_plugins().backends\n"
            "line = [str(p) for p in reg.get('openrlhf').check(spec) if p.where == 'algorithm.is_correction']\n"
            "can = sorted(n for n in reg.ids() if n != 'openrlhf' and 'grpo' in reg.get(n).capabilities().algorithms"
            " and not any(p.where == 'algorithm.is_correction' for p in reg.get(n).check(spec)))\n"
            "print(json.dumps([line, can]))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (line,), can = json.loads(out.stdout.strip().splitlines()[-1])
    tail = f"; backends that can: {', '.join(can)}" if can else "; no installed backend can"
    assert line.endswith(tail) and IS_SEQUENCE_CLIP in line and "openrlhf" not in line.split(";")[-1]


@pytest.mark.parametrize(("sets", "where"), [
    (["backend.name=openrlhf", "backend.options={async: true}", "algorithm.rollout.mode=one_step_off"],
     "backend.options.async"),
    (["backend.name=openrlhf", "backend.options={is_correction: seq}", "algorithm.is_correction.level=token"],
     "backend.options.is_correction"),
])
def test_a_knob_and_its_backend_option_twin_are_not_both_set(sets: list[str], where: str) -> None:
    problems = OpenRLHFBackend().check(load_spec(CALC, [*GRPO, *sets]))
    assert [p.where for p in problems] == [where] and "remove" in problems[0].message


def test_the_kl_in_reward_pin_is_what_it_says(tmp_path: Path) -> None:
    """OpenRLHF's advantages under kl_in=reward (k1, 0.05) are the group-normalised scalar reward on the last action
    token minus kl_coef x each token's k1, summed from each token on; the reference's are the group-normalised
    reward-minus-summed-KL, broadcast: the pinned difference."""
    import torch

    from agentbridge.conformance.algorithms import (
        RECIPE_CASES,
        golden_algorithm_spec,
        golden_batch,
        recipe_of_case,
        reference,
    )
    from agentbridge_openrlhf.algorithm_probe import DIFFERENCES, probe

    batch = golden_batch()
    spec = golden_algorithm_spec("grpo", "openrlhf", 0.0, RECIPE_CASES["kl_in_reward"][1])
    got = torch.tensor(probe(OpenRLHFBackend().compile(spec, tmp_path / "job").path, batch)["advantages"],
                       dtype=torch.float64)
    t = batch.tensors(dtype=torch.float64)
    m = t["mask"].to(torch.float64)
    r = t["rewards"].view(-1, 4)
    norm = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-9)).view(-1)
    rew = -0.05 * (t["old_logp"] - t["ref_logp"]) * m
    rew[torch.arange(len(rew)), m.shape[1] - 1 - torch.fliplr(m.long()).argmax(1)] += norm
    assert torch.allclose(got, torch.flip(torch.cumsum(torch.flip(rew, [1]), 1), [1]) * m, atol=1e-5)
    want = torch.tensor(reference("grpo", batch, 0.05, recipe_of_case("kl_in_reward"))["advantages"],
                        dtype=torch.float64)
    assert DIFFERENCES["grpo@kl_in_reward"]["advantages"].holds(float((got - want).abs().max()), True)
