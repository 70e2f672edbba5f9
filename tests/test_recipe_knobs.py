"""The recipe knobs ``kl_estimator``, ``kl_in``, ``is_correction``, ``overlong`` and ``rollout``: their validation,
the keys adapters refuse them by, and the overlong shaping agentbridge's episode runner applies itself on every
backend (the soft penalty as a reward component, the mask of truncated episodes), training only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentbridge.adapter import Adapter
from agentbridge.rollout.agent_edge import reward_components
from agentbridge.rollout.training import episode_sample, shape_reward
from agentbridge.spec import Spec, SpecError, parse_spec
from agentbridge.spec.recipe import OVERLONG, kl_setting, overlong_penalty, recipe_key
from agentbridge.trajectory import Trajectory


def _spec(**algorithm: Any) -> Spec:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw["algorithm"].update(algorithm)
    return parse_spec(raw)


@pytest.mark.parametrize("algorithm, where", [
    ({"kl_estimator": "k1"}, "kl_estimator needs kl_coef > 0"),
    ({"kl_in": "reward"}, "kl_in needs kl_coef > 0"),
    ({"kl_coef": 0.1, "kl_estimator": "low_var_kl"}, "algorithm.kl_estimator"),
    ({"is_correction": {"cap": 1.0}}, "algorithm.is_correction.cap"),
    ({"is_correction": {"level": "geometric"}}, "algorithm.is_correction.level"),
    ({"overlong": {"buffer": 0}}, "algorithm.overlong.buffer"),
    ({"overlong": {"buffer": 16, "penalty": float("inf")}}, "algorithm.overlong.penalty"),
    ({"rollout": {"mode": "sync", "max_staleness": 2}}, "apply to mode async"),
    ({"rollout": {"mode": "one_step_off", "partial": True}}, "apply to mode async"),
    ({"rollout": {"mode": "async", "max_staleness": 0}}, "algorithm.rollout.max_staleness"),
])
def test_bad_knob_values_are_refused_in_one_line(algorithm: dict[str, Any], where: str) -> None:
    with pytest.raises(SpecError) as refused:
        _spec(**algorithm)
    assert any(where in line for line in refused.value.problems), refused.value.problems


def test_kl_setting_is_the_presets_unless_set() -> None:
    assert kl_setting(_spec(name="grpo", kl_coef=0.1).algorithm) == ("k3", "loss")
    assert kl_setting(_spec(name="grpo", kl_coef=0.1, kl_in="reward").algorithm) == ("k3", "reward")
    assert kl_setting(_spec(name="grpo", kl_coef=0.1, kl_estimator="k2").algorithm) == ("k2", "loss")


def test_set_knobs_dump_and_unset_ones_do_not() -> None:
    spec = _spec(kl_coef=0.1, kl_estimator="k1", is_correction={"mode": "mask"}, rollout={"mode": "async"})
    dumped = spec.algorithm.model_dump()
    assert dumped["kl_estimator"] == "k1"
    assert dumped["is_correction"] == {"level": "token", "mode": "mask", "cap": 2.0}
    assert dumped["rollout"] == {"mode": "async", "max_staleness": None, "partial": False}
    assert not {"kl_in", "overlong"} & set(dumped)


@pytest.mark.parametrize("field, value, key", [
    ("kl_estimator", "k2", "k2"),
    ("is_correction", {"level": "sequence", "mode": "mask"}, "sequence_mask"),
    ("rollout", {"mode": "async", "partial": True}, "async+partial"),
    ("rollout", {"mode": "one_step_off"}, "one_step_off"),
    ("overlong", {"buffer": 8}, "set"),
])
def test_recipe_keys_name_what_adapters_refuse(field: str, value: Any, key: str) -> None:
    extra = {"kl_coef": 0.1} if field.startswith("kl") else {}
    spec = _spec(**{field: value}, **extra)
    assert recipe_key(field, getattr(spec.algorithm, field)) == key


class _Refusing(Adapter):
    name = "refusing"
    recipe_why_not = {"is_correction": {"sequence_mask": "no sequence mask here"},
                      "rollout": {"*": "synchronous only"}}


def test_an_adapters_declared_refusals_match_by_key_and_wildcard() -> None:
    backend = _Refusing()
    assert backend.recipe_refusals(_spec(is_correction={"level": "sequence", "mode": "mask"})) == {
        "algorithm.is_correction": "no sequence mask here"}
    assert backend.recipe_refusals(_spec(is_correction={"level": "token", "mode": "mask"})) == {}
    assert backend.recipe_refusals(_spec(rollout={"mode": "one_step_off"})) == {
        "algorithm.rollout": "synchronous only"}


def test_the_soft_overlong_penalty_is_dapos_ramp() -> None:
    assert overlong_penalty(100, 256, 64, 1.0) == 0.0
    assert overlong_penalty(192, 256, 64, 1.0) == 0.0          # the ramp starts at max - buffer
    assert overlong_penalty(224, 256, 64, 1.0) == pytest.approx(-0.5)
    assert overlong_penalty(256, 256, 64, 2.0) == pytest.approx(-2.0)
    assert overlong_penalty(300, 256, 64, 1.0) == pytest.approx(-1.0)  # never beyond the full penalty


def _traj(tokens: int, finish: str = "length", reward: float = 1.0) -> Trajectory:
    return Trajectory(task_id="t", prompt_ids=[1, 2], response_ids=list(range(3, 3 + tokens)),
                      response_mask=[1] * tokens, logprobs=[-0.5] * tokens, reward=reward,
                      reward_components={"math/exact_answer": reward}, finish_reason=finish)


def test_shaping_adds_the_penalty_as_a_component_of_the_reward() -> None:
    spec = _spec(overlong={"buffer": 64})  # calculator: max_response_tokens 256
    assert reward_components(spec)[-1] == OVERLONG
    traj = _traj(240)
    shape_reward(traj, spec)
    assert traj.reward_components[OVERLONG] == pytest.approx(-0.75)
    assert traj.reward == pytest.approx(0.25)
    errored = _traj(240, finish="error", reward=0.0)
    shape_reward(errored, spec)
    assert OVERLONG not in errored.reward_components and errored.reward == 0.0
    plain = _spec()
    untouched = _traj(256)
    shape_reward(untouched, plain)
    assert untouched.reward == 1.0 and OVERLONG not in reward_components(plain)


class _Renderer:
    eos_token_id = 0


def test_mask_truncated_trains_on_no_token_of_a_truncated_episode() -> None:
    overlong = _spec(overlong={"mask_truncated": True}).algorithm.overlong
    cut = episode_sample(_traj(10), None, _Renderer(), None, overlong)
    assert cut.response_mask == [0] * 10 and len(cut.response_ids) == 10
    done = episode_sample(_traj(10, finish="done"), None, _Renderer(), None, overlong)
    assert done.response_mask == [1] * 10
    kept = episode_sample(_traj(10), None, _Renderer(), None, None)
    assert kept.response_mask == [1] * 10


@pytest.mark.parametrize("algorithm, cases", [
    ({}, []),
    ({"kl_coef": 0.05, "kl_estimator": "k1"}, ["kl_k1"]),
    ({"kl_coef": 0.05, "kl_in": "reward"}, ["kl_in_reward"]),          # whatever the estimator in the reward
    ({"is_correction": {"cap": 3.0}}, ["is_token_truncate"]),          # whatever the cap
    ({"clip": {"high": 0.28}}, ["clip_higher"]),
    ({"loss_agg": "token_mean", "scale_advantages": "none"}, ["token_mean", "scale_none"]),
])
def test_a_spec_meets_the_recipe_cases_it_sets_the_way_they_do(algorithm: dict[str, Any], cases: list[str]) -> None:
    from agentbridge.conformance.algorithms import matching_recipe_cases

    assert matching_recipe_cases(_spec(**algorithm).algorithm) == cases


def test_validate_warns_of_the_recipe_pins_a_spec_meets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pinned recipe difference (a backend's DIFFERENCES under grpo@<case>) reaches validate's warnings and the
    compiled job's manifest (both read spec_differences) for a spec that sets that knob, not for one that does not."""
    from agentbridge.conformance import algorithms

    class Pinned:
        name = "pinned"

    table = {"grpo@kl_in_reward": {"advantages": algorithms.Documented("returns from each token on", None, 1.45)}}
    monkeypatch.setattr(algorithms, "declared_differences", lambda backend, name: dict(table.get(name, {})))
    on = algorithms.spec_differences(Pinned(), _spec(kl_coef=0.05, kl_in="reward").algorithm)
    off = algorithms.spec_differences(Pinned(), _spec(kl_coef=0.05).algorithm)
    assert on == ["recipe kl_in=reward, k1 (KL 0.05) on pinned (measured on grpo): advantages differs from "
                  "agentbridge's reference: returns from each token on"]
    assert off == []


def test_a_spec_that_chooses_its_kl_drops_the_presets_kl_only_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.conformance import algorithms

    class Pinned:
        name = "pinned"

    table = {"reinforce_pp": {"kl": algorithms.Documented("k3 in the loss", None, 0.01),
                              "advantages": algorithms.Documented("unbiased whitening", 0.1, 0.1)}}
    monkeypatch.setattr(algorithms, "declared_differences", lambda backend, name: dict(table.get(name, {})))
    preset = algorithms.spec_differences(Pinned(), _spec(name="reinforce_pp", kl_coef=0.05).algorithm)
    chosen = algorithms.spec_differences(Pinned(), _spec(name="reinforce_pp", kl_coef=0.05, kl_in="reward").algorithm)
    assert [line.split(": ")[1].split()[0] for line in preset] == ["kl", "advantages"]
    assert [line.split(": ")[1].split()[0] for line in chosen] == ["advantages"]
