"""veRL's core_algos against agentbridge's reference math, configured as the compiled job configures them."""

from __future__ import annotations

import pytest

from agentbridge.conformance.algorithms import problem_lines, run_algorithms


def test_grpo_matches_and_turning_off_std_normalisation_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    (cell,) = run_algorithms("verl", ("grpo",))
    assert cell.status in ("✔", "≈"), problem_lines([cell])
    assert set(cell.deltas) == {"advantages", "loss", "clip_fraction", "kl", "kept"}
    from agentbridge_verl import algorithms

    monkeypatch.setitem(algorithms.ALGORITHMS["grpo"], "algorithm.norm_adv_by_std_in_grpo", False)
    (broken,) = run_algorithms("verl", ("grpo",))
    assert broken.status == "✘" and broken.unexpected() == ["advantages"]
    assert [line.split(" max|Δ|=")[0] for line in problem_lines([broken])] == ["grpo verl advantages"]


def test_dapo_keeps_the_groups_veRLs_replay_buffer_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """DAPO's dynamic sampling is the V1 trainer's ReplayBuffer evicting groups whose rewards are all equal: the
    groups kept are the reference's; turning the filter off keeps every group, a named difference."""
    (cell,) = run_algorithms("verl", ("dapo",))
    assert cell.status in ("✔", "≈"), problem_lines([cell])
    from agentbridge_verl import algorithms

    monkeypatch.setitem(algorithms.ALGORITHMS["dapo"], "algorithm.filter_groups.enable", False)
    (broken,) = run_algorithms("verl", ("dapo",))
    assert broken.status == "✘" and broken.unexpected() == ["kept"]

