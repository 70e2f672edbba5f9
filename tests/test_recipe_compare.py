"""The recipe knobs in ``agentbridge compare``: the LoRA, entropy-bonus, grad-clip, overlong and batch rows in the
shared words of ``agentbridge.compare.semantics`` (which adapters write from its documented literal formats), the same
words for the same spec on every backend whose environment is here, and the importance-sampling metric names every
adapter's metric table maps onto (``agentbridge.runs.IS_METRIC_NAMES``)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from agentbridge.backends import backend_python, compile_job, get_backend
from agentbridge.compare.semantics import (
    ASPECTS,
    aspect_difference_lines,
    batch_words,
    differing,
    entropy_words,
    grad_clip_words,
    lora_words,
    overlong_words,
    semantics_table,
    shared,
)
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge.spec import load_spec

RECIPE_ROWS = ("LoRA", "entropy bonus", "grad clip", "overlong", "batch")
SMALL = ["data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2", "algorithm.group_size=4",
         "algorithm.steps=1", "algorithm.warm_start=null", "algorithm.name=grpo"]
KNOBS = ["algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true",
         "algorithm.overlong.buffer=16", "algorithm.mini_batches=2"]
LORA = ["model.lora.rank=16", "model.lora.target_modules=[v_proj,q_proj]", "algorithm.epochs=2"]
# each adapter's metric table: backend's name -> agentbridge's
TABLES = {"trl": "agentbridge_trl.trainer", "verl": "agentbridge_verl.run_metrics",
          "openrlhf": "agentbridge_openrlhf.run_metrics", "rlinf": "agentbridge_rlinf.run_metrics",
          "slime": "agentbridge_slime.run_metrics", "roll": "agentbridge_roll.run_metrics"}


def test_the_shared_words_of_the_recipe_rows() -> None:
    assert {"LoRA", "entropy bonus", "grad clip", "overlong", "batch"} <= set(ASPECTS)
    assert lora_words(16, 32.0, ["v_proj", "q_proj"]) == "rank 16, alpha 32, targets q_proj v_proj"
    assert lora_words(8, None, "all-linear", 0.05) == "rank 8, alpha 16, targets all-linear, dropout 0.05"
    assert lora_words(0) == lora_words(None) == "full fine-tuning"
    assert (entropy_words(0.01), entropy_words(0.0), entropy_words(None)) == ("coef 0.01", "none", "none")
    assert (grad_clip_words(0.5), grad_clip_words(1), grad_clip_words(0.0), grad_clip_words(None)) == \
        ("max norm 0.5", "max norm 1", "none", "none")
    assert batch_words(8, 4, 1, 2) == "8 prompts x 4 samples, 1 epoch(s) x 2 mini-batch(es)"
    assert overlong_words(True, 64, 1.0) == "truncated episodes masked; penalty 1 over the last 64 tokens"
    assert (overlong_words(False, 64, 0.5), overlong_words(True), overlong_words(False)) == \
        ("penalty 0.5 over the last 64 tokens", "truncated episodes masked", "none")


def test_a_recipe_row_differs_in_its_shared_words_only() -> None:
    trl = {"LoRA": "rank 16, alpha 32, targets all-linear · peft LoraConfig(r=16)", "grad clip": "max norm 1 · a"}
    verl = {"LoRA": "rank 16, alpha 32, targets all-linear · lora_rank 16", "grad clip": "max norm 0.5 · b"}
    openrlhf = {"LoRA": "full fine-tuning · ds.lora.rank 0", "grad clip": "max norm 1 · c"}
    assert differing({"trl": trl, "verl": verl}) == ["grad clip"]
    assert differing({"trl": trl, "openrlhf": openrlhf}) == ["LoRA"]
    assert aspect_difference_lines({"trl": trl, "openrlhf": openrlhf}) == [
        "LoRA: trl rank 16, alpha 32, targets all-linear; openrlhf full fine-tuning"]
    table = semantics_table({"trl": trl, "verl": verl})
    assert "<tr class='differs'><th title='the global gradient norm" in table and ">LoRA</th>" in table


def test_every_adapter_table_maps_only_onto_the_cores_is_names() -> None:
    """Each adapter's metric table maps its backend's IS metrics onto names of ``IS_METRIC_NAMES`` and no others;
    every shared name is filled by some backend (which backend logs which: docs/concepts/runs.md)."""
    filled: dict[str, set[str]] = {}
    for backend, module in TABLES.items():
        table = importlib.import_module(module).NORMALIZED
        names = {name for name in table.values() if name.startswith("is/")}
        assert names <= set(IS_METRIC_NAMES), (backend, names - set(IS_METRIC_NAMES))
        assert names, f"{backend} maps none of its metrics onto an IS name"
        for name in names:
            filled.setdefault(name, set()).add(backend)
    assert set(filled) == set(IS_METRIC_NAMES), set(IS_METRIC_NAMES) - set(filled)
    assert filled["is/capped_fraction"] == {"verl", "openrlhf", "slime", "roll"}
    assert filled["is/mismatch_kl"] == {"verl", "openrlhf", "slime"}
    assert filled["is/logp_abs_diff"] == {"trl", "rlinf", "slime"}


def _semantics(backend: str, sets: list[str], out: Path) -> dict[str, str]:
    b = get_backend(backend)
    report = b.validate(compile_job(load_spec("examples/calculator.yaml", [*SMALL, *sets]), b, out / backend))
    assert report.ok, [str(p) for p in report.problems]
    return dict(report.details["semantics"])


def _here(names: tuple[str, ...]) -> list[str]:
    """The backends of ``names`` whose own code runs here or in an environment of theirs."""
    return [name for name in names if backend_python(name, get_backend(name).module) is not None]


def test_the_same_recipe_reads_the_same_on_every_backend(tmp_path: Path) -> None:
    """The same spec through each backend's validator, in each backend's environment: the recipe rows read from
    each backend's own config say the same in shared words."""
    backends = _here(("trl", "verl", "openrlhf", "rlinf"))
    if len(backends) < 2:
        pytest.skip(f"fewer than two backends run here ({backends}): bash adapters/<name>/test.sh")
    rows = {name: _semantics(name, KNOBS, tmp_path) for name in backends}
    want = {"entropy bonus": "coef 0.01", "grad clip": "max norm 0.5",
            "overlong": "truncated episodes masked; penalty 1 over the last 16 tokens",
            "batch": "2 prompts x 4 samples, 1 epoch(s) x 2 mini-batch(es)"}
    for name, sem in rows.items():
        assert {aspect: shared(sem[aspect]) for aspect in want} == want, name
        assert shared(sem["LoRA"]) == "full fine-tuning", name
    assert not set(differing(rows)) & set(RECIPE_ROWS), differing(rows)


def test_the_same_lora_reads_the_same_where_lora_maps(tmp_path: Path) -> None:
    backends = _here(("trl", "verl"))
    if len(backends) < 2:
        pytest.skip(f"fewer than two LoRA backends run here ({backends}): bash adapters/verl/test.sh")
    rows = {name: _semantics(name, LORA, tmp_path) for name in backends}
    for name, sem in rows.items():
        assert shared(sem["LoRA"]) == lora_words(16, 32, ["q_proj", "v_proj"]), name
        assert shared(sem["batch"]) == batch_words(2, 4, 2, 1), name
    assert not set(differing(rows)) & set(RECIPE_ROWS), differing(rows)
