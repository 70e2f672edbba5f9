"""The recipe's KL, IS-correction and rollout-mode knobs on slime: each mapped knob is slime's own flag in the
compiled job (where slime imports, its parser and ``slime_validate_args`` read them back, and its MIS helper weighs
the golden batch as the reference does), each refused one is one line naming the installed backends that can. slime
has no algorithm probe (its loss needs Megatron-LM): its recipe row is n/a."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from slime_testkit import EXAMPLE, ROOT, SMALL, compile_job, needs_slime

from agentbridge.spec import load_spec
from agentbridge.testing import assert_refusal_names_who_can
from agentbridge_slime.backend import SlimeBackend
from agentbridge_slime.config import ICEPOP, MIS

GRPO = ["algorithm.name=grpo"]
TWO_GPUS = ["resources.gpus_per_node=2"]
TIS = ("use-tis", "tis-clip", "custom-tis-function-path", "use-rollout-logprobs")


def _flags(tmp_path: Path, *sets: str) -> dict[str, Any]:
    """The compiled job's flags (the spec passes slime's check first)."""
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    assert SlimeBackend().check(spec) == [], [str(p) for p in SlimeBackend().check(spec)]
    return dict(yaml.safe_load((compile_job(tmp_path / "job", *sets).path / "slime_job.yaml").read_text()))


KL_FLAGS = ("use-kl-loss", "kl-loss-coef", "kl-coef", "kl-loss-type")


@pytest.mark.parametrize(("sets", "want"), [
    # KL in the loss: --use-kl-loss with the estimator as --kl-loss-type (k3: the preset's low_var_kl)
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"], (True, 0.05, None, "k1")),
    ([*GRPO, "algorithm.kl_coef=10", "algorithm.kl_estimator=k2"], (True, 10.0, None, "k2")),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss"], (True, 0.05, None, "k1")),
    # KL in the reward (reinforce_plus_plus, ppo): --kl-coef, the same --kl-loss-type naming its estimator
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"],
     (None, None, 0.05, "k2")),
    (["algorithm.name=ppo", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3"], (None, None, 0.05, "low_var_kl")),
    # both null: the presets' flags, as before the knobs existed
    ([*GRPO, "algorithm.kl_coef=0.05"], (True, 0.05, None, "low_var_kl")),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05"], (None, None, 0.05, None)),
])
def test_kl_knobs_set_slimes_flags(sets: list[str], want: tuple[Any, ...], tmp_path: Path) -> None:
    flags = _flags(tmp_path, *sets)
    assert tuple(flags.get(k) for k in KL_FLAGS) == want


@pytest.mark.parametrize(("level", "mode", "path"), [
    ("token", "truncate", None), ("token", "mask", ICEPOP), ("sequence", "truncate", MIS), ("sequence", "mask", MIS)])
def test_is_correction_is_slimes_tis(level: str, mode: str, path: str | None, tmp_path: Path) -> None:
    """--use-tis at --tis-clip cap, weighing the trainer's recomputed log-probs (--use-rollout-logprobs off: slime
    refuses both) against the engine's: slime's TIS, its IcePop, or its MIS helper with the level and mode in the
    custom config."""
    flags = _flags(tmp_path, *GRPO, f"algorithm.is_correction.level={level}", f"algorithm.is_correction.mode={mode}",
                   "algorithm.is_correction.cap=3")
    assert tuple(flags.get(k) for k in TIS) == (True, 3.0, path, None)
    custom = yaml.safe_load((tmp_path / "job" / "agentbridge.yaml").read_text())
    if level == "sequence":
        assert {k: custom[k] for k in ("tis_level", "tis_mode", "tis_upper_bound", "tis_lower_bound", "use_rs",
                                       "tis_batch_normalize")} == \
            {"tis_level": "sequence", "tis_mode": mode, "tis_upper_bound": 3.0, "tis_lower_bound": 0.0,
             "use_rs": False, "tis_batch_normalize": False}
    else:
        assert custom == {"agentbridge_spec": "spec.yaml"}


def test_one_step_off_runs_train_async_on_gpus_of_its_own(tmp_path: Path) -> None:
    """one_step_off: slime's train_async.py, not colocated (it asserts so): the actor on half the GPUs, SGLang on the
    rest; the job says so."""
    flags = _flags(tmp_path, *GRPO, "resources.gpus_per_node=4", "algorithm.rollout.mode=one_step_off")
    assert "colocate" not in flags  # False: left out of the argument list
    assert (flags["actor-num-nodes"], flags["actor-num-gpus-per-node"], flags["rollout-num-gpus"]) == (1, 2, 2)
    launch = (tmp_path / "job" / "launch.sh").read_text()
    assert '"$PYTHON" "$SLIME_DIR/train_async.py" "${MODEL_ARGS[@]}" "${ARGS[@]}" "$@"' in launch
    assert "$SLIME_DIR/train.py" not in launch
    notes = yaml.safe_load(yaml.safe_dump(compile_job(tmp_path / "again", *GRPO, "resources.gpus_per_node=4",
                                                      "algorithm.rollout.mode=one_step_off").manifest["notes"]))
    assert any(n.startswith("algorithm.rollout one_step_off: slime's train_async.py") for n in notes)
    several = _flags(tmp_path / "nodes", *GRPO, "resources.nodes=3", "resources.gpus_per_node=8",
                     "algorithm.rollout.mode=one_step_off")
    assert (several["actor-num-nodes"], several["actor-num-gpus-per-node"], several["rollout-num-gpus"]) == (1, 8, 16)
    sync = _flags(tmp_path / "sync", *GRPO, "resources.gpus_per_node=4", "algorithm.rollout.mode=sync")
    assert sync["colocate"] is True and "rollout-num-gpus" not in sync
    assert '"$SLIME_DIR/train.py"' in (tmp_path / "sync" / "job" / "launch.sh").read_text()


def test_one_step_off_with_colocate_is_refused() -> None:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *GRPO, *TWO_GPUS, "algorithm.rollout.mode=one_step_off",
                                      "backend.options.colocate=true"])
    assert [str(p) for p in SlimeBackend().check(spec)] == [
        "backend.options.colocate: must be false with algorithm.rollout one_step_off: slime's train_async.py asserts "
        "not args.colocate"]


@pytest.mark.parametrize(("sets", "field", "why"), [
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1"], "algorithm.kl_in",
     "get_grpo_returns) ignore the KL"),
    (["algorithm.name=gspo", "algorithm.kl_coef=0.05", "algorithm.kl_in=reward"], "algorithm.kl_in",
     "--kl-coef shapes the rewards of reinforce_plus_plus and ppo only"),
    ([*GRPO, "algorithm.rollout.mode=async"], "algorithm.rollout", "bounds no staleness"),
    ([*GRPO, "algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=2", "algorithm.rollout.partial=true"],
     "algorithm.rollout", "train_async.py, is one step off"),
    ([*GRPO, "algorithm.rollout.mode=one_step_off"], "algorithm.rollout", "GPUs of their own, 2 or more"),
])
def test_a_refused_knob_is_one_line_naming_who_can(sets: list[str], field: str, why: str) -> None:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    problems = [str(p) for p in SlimeBackend().check(spec)]
    assert len(problems) == 1, problems
    (line,) = problems
    assert line.startswith(f"{field}: slime cannot run {spec.algorithm.name} with ") and why in line, line
    assert_refusal_names_who_can(line, field, spec, "slime")


@needs_slime
@pytest.mark.parametrize(("sets", "kl", "correction", "rollout"), [
    ([*GRPO, "algorithm.kl_coef=10", "algorithm.kl_estimator=k2"], "k2 in the loss, coef 10.0", "none", "sync"),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"],
     "k2 in the reward, coef 0.05", "none", "sync"),
    ([*GRPO, "algorithm.is_correction.level=token"], "none", "token truncate, cap 2", "sync"),
    ([*GRPO, "algorithm.is_correction.level=token", "algorithm.is_correction.mode=mask",
      "algorithm.is_correction.cap=3"], "none", "token mask, cap 3", "sync"),
    ([*GRPO, "algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask"], "none",
     "sequence mask, cap 2", "sync"),
    ([*GRPO, *TWO_GPUS, "algorithm.rollout.mode=one_step_off"], "none", "none", "one_step_off"),
])
def test_slime_reads_the_recipe_flags_back(sets: list[str], kl: str, correction: str, rollout: str,
                                           tmp_path: Path) -> None:
    """slime's parser and slime_validate_args accept each mapped job (use_tis with the rollout log-probs, or both KL
    coefficients, would fail them), and what it will do, in compare's shared words, is the spec's knob."""
    from agentbridge.compare.semantics import shared

    report = SlimeBackend().validate(compile_job(tmp_path / "job", *sets))
    assert report.ok, [str(p) for p in report.problems]
    semantics = report.details["semantics"]
    assert (semantics["KL"], shared(semantics["IS correction"]), shared(semantics["rollout mode"])) == \
        (kl, correction, rollout)


@needs_slime
def test_slime_refuses_tis_on_the_rollout_logprobs(tmp_path: Path) -> None:
    """Why an IS-corrected job drops --use-rollout-logprobs: slime_validate_args refuses it beside --use-tis."""
    job = compile_job(tmp_path / "job", *GRPO, "algorithm.is_correction.level=token",
                      "backend.overrides={use-rollout-logprobs: true}")
    (line,) = [str(p) for p in SlimeBackend().validate(job).problems]
    assert "use_rollout_logprobs and use_tis cannot be set at the same time" in line


@needs_slime
def test_the_tis_functions_are_slimes() -> None:
    """The custom TIS functions the jobs name are in the slime checkout: IcePop in its loss module (read: it imports
    Megatron-LM), the MIS helper importable from the checkout's examples package (launch.sh puts SLIME_DIR on
    PYTHONPATH)."""
    import importlib
    import importlib.util

    spec = importlib.util.find_spec("slime")
    assert spec is not None and spec.origin is not None
    loss = (Path(spec.origin).parent / "backends" / "megatron_utils" / "loss.py").read_text()
    assert f"def {ICEPOP.rsplit('.', 1)[1]}(" in loss and ICEPOP.startswith("slime.backends.megatron_utils.loss.")
    module, _, name = MIS.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


@needs_slime
@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_slimes_mis_helper_weighs_the_golden_batch_as_the_reference(mode: str, tmp_path: Path) -> None:
    """The sequence-level cases through slime's own MIS helper (compute_mis_weights), configured by the compiled
    job's parsed args: its weights (times the rejection mask it returns) are the reference's is_weights on the
    golden batch, the trainer's old log-probs against the engine's."""
    import importlib

    import torch

    from agentbridge.conformance.algorithms import IDENTICAL, golden_batch, is_weights
    from agentbridge.models import resolve_model_path
    from agentbridge_slime.validate import parse_job

    job = compile_job(tmp_path / "job", *GRPO, "algorithm.is_correction.level=sequence",
                      f"algorithm.is_correction.mode={mode}")
    args = parse_job(job.path.resolve(), str(resolve_model_path("builtin:tiny")))
    mis = importlib.import_module(MIS.rpartition(".")[0])
    t = golden_batch().tensors(dtype=torch.float32)
    rows = [(t["old_logp"][i], t["rollout_logp"][i], t["mask"][i].float()) for i in range(len(t["mask"]))]
    weights, masks, _ = mis.compute_mis_weights(args, train_log_probs=[r[0] for r in rows],
                                                rollout_log_probs=[r[1] for r in rows],
                                                loss_masks=[r[2] for r in rows])
    got = torch.stack([w * m for w, m in zip(weights, masks, strict=True)])
    m = t["mask"].float()
    want = is_weights(t, m, "sequence", mode, 2.0) * m
    assert float((got - want).abs().max()) <= IDENTICAL
    uncapped = is_weights(t, m, "sequence", "truncate", 1e9) * m
    assert bool(((want - uncapped).abs() > 0.1).any())  # the cap bites on the golden batch
