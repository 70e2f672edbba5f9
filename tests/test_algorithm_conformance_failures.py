"""Algorithm conformance that can fail: each hole broken on purpose through TRL's real probe (its output bent by a
wrapper) is a ✘ naming backend, algorithm and quantity, and ``conformance --algorithms`` exits 1; unbent, the
cells pass at their pins. The TRL probe runs once per variant for the whole module (its output is cached)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.conformance.algorithms import (
    KL_COEF,
    Documented,
    compare_cell,
    declared_differences,
    golden_batch,
    problem_lines,
    reference,
    run_algorithms,
)
from agentbridge.conformance.suite import _backend

Bend = Callable[[str, dict[str, Any]], dict[str, Any]]
_REAL: dict[str, dict[str, Any]] = {}  # TRL's real probe output per job directory ("gspo", "gspo_kl", ...)


@pytest.fixture
def bend_trl(monkeypatch: pytest.MonkeyPatch) -> Callable[[Bend | None], None]:
    """Replace TRL's probe by one returning its real output (cached) passed through ``bend(job name, output)``."""
    from agentbridge_trl import algorithm_probe

    real = algorithm_probe.probe

    def install(bend: Bend | None) -> None:
        def probe(job: Path, batch: Any) -> dict[str, Any]:
            name = Path(job).name
            if name not in _REAL:
                _REAL[name] = real(job, batch)
            out = copy.deepcopy(_REAL[name])
            return bend(name, out) if bend else out

        monkeypatch.setattr(algorithm_probe, "probe", probe)

    return install


def _line(cells: list[Any], start: str) -> str:
    (line,) = [x for x in problem_lines(cells) if x.startswith(start)]
    return line


def test_the_unbent_trl_cells_pass_at_their_pins(bend_trl: Callable[[Bend | None], None]) -> None:
    bend_trl(None)
    cells = {c.algorithm: c for c in run_algorithms("trl", ("dapo", "gspo"))}
    assert not cells["dapo"].missing and not cells["gspo"].missing
    assert cells["dapo"].status == "≠" and cells["dapo"].differing() == ["kept"]
    assert [cells["dapo"].variants[side]["kept"] for side in ("off", "on")] == [2.0, 2.0]  # groups 0 and 1 kept
    assert cells["gspo"].status == "≠" and cells["gspo"].differing() == ["clip_fraction"]
    assert cells["gspo"].pinned["clip_fraction"].holds(cells["gspo"].deltas["clip_fraction"], kl=True)
    assert "(documented: with importance_sampling_level sequence" in _line(list(cells.values()), "gspo trl clip")


def test_a_documented_difference_ten_times_bigger_fails(bend_trl: Callable[[Bend | None], None]) -> None:
    batch = golden_batch()

    def ten_times(name: str, out: dict[str, Any]) -> dict[str, Any]:
        if name.startswith("gspo"):
            want = reference("gspo", batch, KL_COEF if name.endswith("_kl") else 0.0)["clip_fraction"]
            out["clip_fraction"] = want + 10 * (out["clip_fraction"] - want)
        return out

    bend_trl(ten_times)
    (cell,) = run_algorithms("trl", ("gspo",))
    assert cell.status == "✘" and cell.unexpected() == ["clip_fraction (pinned difference moved)"]
    line = _line([cell], "gspo trl clip_fraction")
    assert "max|Δ|=0.397 (undocumented): now 0.3968 KL off, 0.3968 KL on" in line and "pinned at 0.03968" in line


def test_a_documented_group_difference_that_changes_fails(bend_trl: Callable[[Bend | None], None]) -> None:
    bend_trl(lambda name, out: {**out, "kept": [1, 2]} if name == "dapo_kl" else out)  # drops one group more
    (cell,) = run_algorithms("trl", ("dapo",))
    assert cell.status == "✘" and cell.unexpected() == ["kept (pinned difference moved)"]
    assert cell.variants["off"]["kept"] == 2.0 and cell.variants["on"]["kept"] == 1.0
    assert "(undocumented): now 1 KL on; the documented difference is pinned at 2 KL off, 2 KL on" in \
        _line([cell], "dapo trl kept")


def test_a_quantity_left_out_fails_unless_declared(bend_trl: Callable[[Bend | None], None],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge_trl import algorithm_probe

    bend_trl(lambda name, out: {k: v for k, v in out.items() if k != "kl"} if name == "grpo_kl" else out)
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status == "✘" and cell.unexpected() == ["kl (not returned)"] and cell.missing == {"kl": ["on"]}
    assert _line([cell], "grpo trl kl").startswith("grpo trl kl not returned by the probe with KL on (undocumented)")
    bend_trl(lambda name, out: {**out, "clip_fraction": None})  # None is not a value either
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status == "✘" and cell.missing == {"clip_fraction": ["off", "on"]}
    # declared: not a failure, and said once per backend
    monkeypatch.setattr(algorithm_probe, "NOT_PRODUCED", {"clip_fraction": "no clip metric"})
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status in ("✔", "≈") and "trl clip_fraction not produced by its probe (declared: no clip metric)" \
        in problem_lines([cell])
    # declared, yet returned: the declaration is stale
    bend_trl(None)
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status == "✘" and cell.unexpected() == ["clip_fraction (declared not produced, yet returned)"]
    assert _line([cell], "grpo trl clip_fraction returned") == "grpo trl clip_fraction returned by the probe " \
        "(undocumented): its NOT_PRODUCED says it cannot be (no clip metric)"


def test_clip_fraction_is_compared_with_the_reference(bend_trl: Callable[[Bend | None], None]) -> None:
    bend_trl(lambda name, out: {**out, "clip_fraction": out["clip_fraction"] + 0.05} if name == "grpo" else out)
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status == "✘" and cell.unexpected() == ["clip_fraction"]
    assert _line([cell], "grpo trl clip_fraction") == "grpo trl clip_fraction max|Δ|=0.05 (undocumented)"


def test_the_cli_exits_1_naming_the_cell(bend_trl: Callable[[Bend | None], None],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.conformance import algorithms, step

    monkeypatch.setattr(step, "run_step", lambda name, workdir=None: step.StepCell(name, "✔", {"loss": 0.0}))
    real = algorithms.run_algorithms
    monkeypatch.setattr(algorithms, "run_algorithms",
                        lambda name, workdir=None, recipe=(): real(name, ("dapo", "gspo"), workdir))
    bend_trl(None)
    ok = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert ok.exit_code == 0, ok.output
    assert "difference: gspo trl clip_fraction max|Δ|=0.0397 (documented: " in ok.stderr
    bend_trl(lambda name, out: {**out, "clip_fraction": 10 * out["clip_fraction"]} if name.startswith("gspo")
             else out)
    broken = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert broken.exit_code == 1, broken.output
    rows = {line.split()[0]: line.split(None, 1)[1] for line in broken.stdout.split("\n\n")[0].splitlines()[1:]}
    assert rows["dapo"] == "≠ kept" and rows["gspo"] == "✘ clip_fraction (pinned difference moved)"
    assert "difference: gspo trl clip_fraction max|Δ|=" in broken.stderr and "(undocumented): now" in broken.stderr


def test_pins_of_every_declared_difference_hold_on_synthetic_output() -> None:
    """Each adapter's declared differences, fed a backend output exactly at the pin (reference + pinned Δ on one
    entry), pass; ten times the pin, or the pin in a variant it is not declared for, fails."""
    batch = golden_batch()

    def at(name: str, quantity: str, scale: float, kl_only_off: float = 0.0) -> dict[str, dict[str, Any]]:
        out = {}
        for variant, coef, side in ((name, 0.0, "off"), (f"{name}+kl", KL_COEF, "on")):
            want = reference(name, batch, coef)
            pin = getattr(declared[quantity], side)
            delta = scale * pin if pin is not None else kl_only_off
            got = copy.deepcopy(want)
            if quantity == "advantages":
                row = got["advantages"][8]
                row[0] += delta
            elif quantity == "kept":  # the groups dynamic sampling drops, kept
                got["kept"] = want["kept"] + [g for g in batch.groups() if g not in want["kept"]][:int(delta)]
            else:
                got[quantity] = want[quantity] + delta
            out[variant] = got
        return out

    checked = 0
    for backend in ("trl", "openrlhf", "verl", "rlinf", "roll"):
        try:
            b = _backend(backend)
        except Exception:  # noqa: BLE001 - an adapter not installed here
            continue
        for name in ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo"):
            table = declared_differences(b, name)
            for quantity, declared_one in table.items():
                declared = {quantity: declared_one}
                assert not declared_one.unpinned, (backend, name, quantity)
                cell = compare_cell(name, backend, at(name, quantity, 1.0), batch, declared)
                assert cell.status == "≠", (backend, name, quantity, cell.unexpected())
                if quantity != "kept":
                    bent = compare_cell(name, backend, at(name, quantity, 10.0), batch, declared)
                    assert bent.unexpected() == [f"{quantity} (pinned difference moved)"], (backend, name, quantity)
                if declared_one.kl_only:
                    leak = compare_cell(name, backend, at(name, quantity, 1.0, kl_only_off=0.01), batch, declared)
                    assert leak.status == "✘" and leak.moved()[0][:2] == (quantity, "off"), (backend, name)
                checked += 1
    assert checked >= 4


def test_an_unpinned_declaration_fails() -> None:
    batch = golden_batch()
    want = reference("grpo", batch, 0.0)
    bad = {"grpo": {**want, "loss": want["loss"] + 0.01}, "grpo+kl": reference("grpo", batch, KL_COEF)}
    cell = compare_cell("grpo", "b", bad, batch, {"loss": "why"})  # a reason without a value
    assert cell.status == "✘" and cell.unexpected() == ["loss (documented, not pinned)"]
    pinned = compare_cell("grpo", "b", bad, batch, {"loss": Documented("why", off=0.01, on=None)})
    assert pinned.status == "≠" and "pinned at 0.01 KL off ±1%" in problem_lines([pinned])[0]
