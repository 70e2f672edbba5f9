"""One optimizer step: TRL's trainer step against agentbridge's reference step, and a broken optimizer mapping."""

from __future__ import annotations

import pytest

from agentbridge.conformance.step import STEP_QUANTITIES, run_step, step_lines


def test_trl_step_equals_the_reference_and_weight_decay_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = run_step("trl")
    assert cell.status in ("✔", "≈"), step_lines([cell])
    assert tuple(cell.deltas) == STEP_QUANTITIES
    from agentbridge_trl import config

    monkeypatch.setitem(config.ALGORITHMS["grpo"], "weight_decay", 0.1)  # the reference's AdamW has none
    broken = run_step("trl")
    assert broken.status == "✘" and broken.worst() == ["update"], step_lines([broken])
    assert step_lines([broken])[0].startswith("step grpo trl ✘")
