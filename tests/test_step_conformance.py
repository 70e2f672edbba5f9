"""One optimizer step: TRL's trainer step against agentbridge's reference step, a broken optimizer mapping, and
documented differences."""

from __future__ import annotations

import pytest

from agentbridge.conformance.step import (
    STEP_QUANTITIES,
    StepCell,
    compare_step,
    reference_update,
    run_step,
    step_lines,
    step_table,
)


def test_trl_step_equals_the_reference_and_weight_decay_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = run_step("trl")
    assert cell.status in ("✔", "≈"), step_lines([cell])
    assert tuple(cell.deltas) == STEP_QUANTITIES
    from agentbridge_trl import config

    monkeypatch.setitem(config.ALGORITHMS["grpo"], "weight_decay", 0.1)  # the reference's AdamW has none
    broken = run_step("trl")
    assert broken.status == "✘" and broken.worst() == ["update"], step_lines([broken])
    assert step_lines([broken])[0].startswith("step grpo trl ✘")


def test_a_documented_loss_difference_is_not_a_failure_and_a_stale_one_is() -> None:
    import torch

    want = {"loss": 1.0, "grad": {"w": torch.tensor([1.0, -0.5])}, "before": {"w": torch.zeros(2)}}
    update = reference_update(want["grad"], 1e-3)
    bent = {"loss": 1.0002, "grad": {"w": torch.tensor([1.0, -0.49])}, "update": update}
    assert compare_step("b", want, bent, 1e-3).status == "✘"  # undocumented: grad 0.01
    known = {"loss": "kl: why", "grad": "kl: why"}
    documented = compare_step("b", want, bent, 1e-3, known)
    assert documented.status == "≠" and documented.differing() == ["loss", "grad"]  # loss 2e-4: below CLOSE
    assert step_lines([documented])[0].endswith("(documented: kl: why)")
    assert step_table([documented]).splitlines()[1].split()[:2] == ["b", "≠"]
    same = {"loss": 1.0, "grad": want["grad"], "update": update}
    stale = compare_step("b", want, same, 1e-3, known)
    assert stale.status == "✘" and stale.unexpected() == ["loss (documented, yet equal)",
                                                          "grad (documented, yet equal)"]
    assert compare_step("b", want, same, 1e-3).status == "✔"
    stopped = step_table([StepCell("c", "stopped", stopped="x")]).splitlines()[1]
    assert stopped.split() == ["c", "not", "run", "on", "CPU"]


def test_a_backend_whose_adapter_has_no_step_probe_is_a_stopped_row_not_an_error() -> None:
    """ROLL's adapter (installed here; ROLL is not) names no step probe: its row says so, the others still run."""
    cell = run_step("roll")
    assert cell.status == "stopped" and cell.stopped == "its adapter has no step probe (agentbridge_roll.step_probe)"
