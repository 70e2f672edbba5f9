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


def test_the_recipe_row_equals_the_reference_or_is_refused() -> None:
    """Each recipe knob (grpo, KL off) through veRL's core_algos as the compiled job configures them: the reference,
    except advantage scaling by the batch's std, which veRL's check refuses naming the backends that can."""
    from agentbridge.conformance.algorithms import RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("verl", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert {case for case, c in cells.items() if c.status not in ("✔", "≈")} == {"scale_batch"}, \
        problem_lines(list(cells.values()))
    # the refusal line (its list of the backends that can is of those installed where the check ran)
    assert cells["scale_batch"].status == "n/a" and cells["scale_batch"].why.startswith(
        "algorithm.scale_advantages: verl cannot run grpo with scale_advantages batch (")
