"""The recipe fields of ``algorithm`` (``clip``, ``entropy_coef``, ``max_grad_norm``, ``loss_agg``): left null they
change no compiled job; set, each reaches every backend's own setting, or the backend refuses the spec in one line
naming the backends that can; values that are not finite or out of range are refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentbridge.adapter import flatten
from agentbridge.backends import compile_job
from agentbridge.plugins import get_plugins
from agentbridge.spec import SpecError, json_schema, load_spec, parse_spec
from agentbridge.spec.recipe import LOSS_AGG, RECIPE_FIELDS

BACKENDS = ["trl", "verl", "openrlhf", "rlinf", "slime", "roll"]
SMALL_DATA = {"train": {"id": "math/arithmetic", "split": "train", "size": 8, "seed": 0},
              "eval": {"id": "math/arithmetic", "split": "eval", "size": 4, "seed": 0}}
RECIPE = {"clip": {"low": 0.1, "high": 0.3, "dual": 4.0}, "entropy_coef": 0.01, "max_grad_norm": 0.5}


def _raw(model: Path, backend: str, **algorithm: Any) -> dict[str, Any]:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw.update(data=SMALL_DATA, model={"path": str(model), "tool_call_format": "hermes"},
               resources={"nodes": 1, "gpus_per_node": 1}, backend={"name": backend})
    raw["algorithm"].update({"name": "grpo", "group_size": 4, "batch_size": 2, "lr": 1.0e-5, "steps": 2,
                             "warm_start": None, **algorithm})
    return raw


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "model"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    return path


def _argv_flags(argv: list[str]) -> dict[str, Any]:
    """``--flag v`` / ``--flag a b`` / ``--switch`` as ``{flag: v | [a, b] | True}``."""
    flags: dict[str, Any] = {}
    key = None
    for token in argv:
        if token.startswith("--"):
            key = token[2:]
            flags[key] = True
        elif key is not None:
            value = flags[key]
            flags[key] = token if value is True else [*(value if isinstance(value, list) else [value]), token]
    return flags


def native(tmp_path: Path, backend: str, **algorithm: Any) -> dict[str, Any]:
    """The compiled job's native settings of ``backend`` for the small spec with ``algorithm`` fields, dotted."""
    if backend not in get_plugins().backends:
        pytest.skip(f"the {backend} adapter is not installed here")
    spec = parse_spec(_raw(_model(tmp_path), backend, **algorithm))
    job = compile_job(spec, get_plugins().backends.get(backend), tmp_path / "job")
    if backend == "trl":
        return dict(json.loads((job.path / "grpo_config.json").read_text()))
    if backend == "openrlhf":
        out = subprocess.run(["bash", str(job.path / "launch.sh"), "--print-args"], cwd=tmp_path, check=True,
                             capture_output=True, env={**os.environ, "OUT": str(tmp_path / "out")}).stdout
        return _argv_flags([a for a in out.decode().split("\0") if a])
    name = {"verl": "agentbridge_job.yaml", "rlinf": "rlinf_job.yaml", "slime": "slime_job.yaml",
            "roll": "roll_job.yaml"}[backend]
    return flatten(yaml.safe_load((job.path / name).read_text()))


def problems(tmp_path: Path, backend: str, **algorithm: Any) -> list[str]:
    """``backend``'s check of the small spec with ``algorithm`` fields, one line each."""
    if backend not in get_plugins().backends:
        pytest.skip(f"the {backend} adapter is not installed here")
    spec = parse_spec(_raw(_model(tmp_path), backend, **algorithm))
    return [str(p) for p in get_plugins().backends.get(backend).check(spec)]


# what each backend writes today for grpo: a spec without the recipe fields must keep it (None: key not written)
UNSET = {
    "trl": {"loss_type": "grpo", "epsilon": None, "epsilon_high": None, "delta": None, "entropy_coef": None,
            "max_grad_norm": None},
    "verl": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
             "actor_rollout_ref.actor.clip_ratio_low": None, "actor_rollout_ref.actor.clip_ratio_c": None,
             "actor_rollout_ref.actor.entropy_coeff": None, "actor_rollout_ref.actor.optim.clip_grad": None,
             "actor_rollout_ref.actor.loss_scale_factor": None},
    "openrlhf": {"actor.loss_agg_mode": "seq-mean-token-mean", "actor.eps_clip_low_high": None,
                 "actor.dual_clip": None, "actor.entropy_coef": None, "actor.max_norm": None},
    "rlinf": {"algorithm.loss_agg_func": "seq-mean-token-mean", "algorithm.ratio_clip_eps": 0.2,
              "algorithm.clip_ratio_low": None, "algorithm.clip_ratio_high": None, "algorithm.clip_ratio_c": None,
              "algorithm.entropy_bonus": 0.0, "algorithm.calculate_entropy": False, "actor.optim.clip_grad": 1.0},
    "slime": {"eps-clip": 0.2, "eps-clip-high": None, "eps-clip-c": None, "entropy-coef": 0.0, "clip-grad": 1.0,
              "calculate-per-token-loss": None, "custom-pg-loss-reducer-function-path": None},
    "roll": {"loss_agg_mode": "seq-mean-token-mean", "pg_clip": 0.2, "use_pg_clip_range": None,
             "dual_clip_loss": None, "entropy_loss_coef": 0.0, "max_grad_norm": 1.0},
}
SET = {
    "trl": {"epsilon": 0.1, "epsilon_high": 0.3, "delta": 4.0, "entropy_coef": 0.01, "max_grad_norm": 0.5},
    "verl": {"actor_rollout_ref.actor.clip_ratio_low": 0.1, "actor_rollout_ref.actor.clip_ratio_high": 0.3,
             "actor_rollout_ref.actor.clip_ratio_c": 4.0, "actor_rollout_ref.actor.entropy_coeff": 0.01,
             "actor_rollout_ref.actor.optim.clip_grad": 0.5},
    "openrlhf": {"actor.eps_clip_low_high": ["0.1", "0.3"], "actor.dual_clip": "4.0", "actor.entropy_coef": "0.01",
                 "actor.max_norm": "0.5"},
    "rlinf": {"algorithm.clip_ratio_low": 0.1, "algorithm.clip_ratio_high": 0.3, "algorithm.clip_ratio_c": 4.0,
              "algorithm.entropy_bonus": 0.01, "algorithm.calculate_entropy": True, "actor.optim.clip_grad": 0.5},
    "slime": {"eps-clip": 0.1, "eps-clip-high": 0.3, "eps-clip-c": 4.0, "entropy-coef": 0.01, "clip-grad": 0.5},
    # ROLL's dual-clip constant is 1 + 2 * pg_clip; with use_pg_clip_range the bounds are pg_clip_low/high
    "roll": {"use_pg_clip_range": True, "pg_clip_low": 0.1, "pg_clip_high": 0.3, "dual_clip_loss": True,
             "pg_clip": 1.5, "entropy_loss_coef": 0.01, "max_grad_norm": 0.5},
}
# algorithm.loss_agg (on grpo) -> the native setting, or None: refused
LOSS_AGG_NATIVE: dict[str, dict[str, dict[str, Any] | None]] = {
    "trl": {"token_mean": {"loss_type": "dapo"}, "seq_mean_token_sum": {"loss_type": "luspo"},
            "seq_mean_token_mean": {"loss_type": "grpo"}, "seq_mean_token_sum_norm": {"loss_type": "dr_grpo"}},
    "verl": {"token_mean": {"actor_rollout_ref.actor.loss_agg_mode": "token-mean"},
             "seq_mean_token_sum": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum"},
             "seq_mean_token_mean": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean"},
             "seq_mean_token_sum_norm": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
                                         "actor_rollout_ref.actor.loss_scale_factor": 256}},
    "openrlhf": {"token_mean": {"actor.loss_agg_mode": "token-mean"}, "seq_mean_token_sum": None,
                 "seq_mean_token_mean": {"actor.loss_agg_mode": "seq-mean-token-mean"},
                 "seq_mean_token_sum_norm": None},
    "rlinf": {"token_mean": {"algorithm.loss_agg_func": "token-mean"},
              "seq_mean_token_sum": {"algorithm.loss_agg_func": "seq-mean-token-sum"},
              "seq_mean_token_mean": {"algorithm.loss_agg_func": "seq-mean-token-mean"},
              "seq_mean_token_sum_norm": None},
    "slime": {"token_mean": {"calculate-per-token-loss": True, "custom-pg-loss-reducer-function-path": None},
              "seq_mean_token_sum": None,
              "seq_mean_token_mean": {"calculate-per-token-loss": None, "custom-pg-loss-reducer-function-path": None},
              "seq_mean_token_sum_norm": {"calculate-per-token-loss": None, "custom-pg-loss-reducer-function-path":
                                          "agentbridge_slime.reducers.dr_grpo_pg_loss_reducer"}},
    "roll": {"token_mean": {"loss_agg_mode": "token-mean"},
             "seq_mean_token_sum": {"loss_agg_mode": "seq-mean-token-sum"},
             "seq_mean_token_mean": {"loss_agg_mode": "seq-mean-token-mean"}, "seq_mean_token_sum_norm": None},
}


def _expect(settings: dict[str, Any], expected: dict[str, Any], backend: str) -> None:
    for key, value in expected.items():
        assert settings.get(key) == value, f"{backend}: {key} is {settings.get(key)!r}, expected {value!r}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_spec_without_recipe_fields_keeps_each_backends_preset(tmp_path: Path, backend: str) -> None:
    _expect(native(tmp_path, backend), UNSET[backend], backend)


def test_unset_recipe_fields_are_not_written_so_spec_hashes_stay() -> None:
    spec = load_spec("examples/calculator.yaml")
    assert not set(RECIPE_FIELDS) & set(spec.algorithm.model_dump())
    set_ = parse_spec({**yaml.safe_load(Path("examples/calculator.yaml").read_text()),
                       "algorithm": {"name": "grpo", "entropy_coef": 0.0, "clip": {"dual": 3.0}}})
    assert set_.algorithm.model_dump()["entropy_coef"] == 0.0
    assert set_.algorithm.model_dump()["clip"] == {"low": None, "high": None, "dual": 3.0}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_recipe_knob_reaches_the_backends_own_setting(tmp_path: Path, backend: str) -> None:
    _expect(native(tmp_path, backend, **RECIPE), SET[backend], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_clip_bound_keeps_the_presets_other(tmp_path: Path, backend: str) -> None:
    settings = native(tmp_path, backend, name="dapo", clip={"low": 0.1})
    key = {"trl": "epsilon_high", "verl": "actor_rollout_ref.actor.clip_ratio_high",
           "openrlhf": "actor.eps_clip_low_high", "rlinf": "algorithm.clip_ratio_high", "slime": "eps-clip-high",
           "roll": "pg_clip_high"}[backend]
    assert settings[key] == (["0.1", "0.28"] if backend == "openrlhf" else 0.28)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", LOSS_AGG)
def test_loss_agg_reaches_the_backend_or_is_refused_in_one_line(tmp_path: Path, backend: str, mode: str) -> None:
    expected = LOSS_AGG_NATIVE[backend][mode]
    if expected is not None:
        assert problems(tmp_path, backend, loss_agg=mode) == []
        _expect(native(tmp_path, backend, loss_agg=mode), expected, backend)
        return
    lines = problems(tmp_path, backend, loss_agg=mode)
    can = sorted(b for b in BACKENDS if LOSS_AGG_NATIVE[b][mode] is not None)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"algorithm.loss_agg: {backend} cannot run grpo with loss_agg {mode} (")
    named = lines[0].rsplit("; backends that can: ", 1)[1].split(", ")  # the installed ones (a test's may join)
    assert set(can) <= set(named) and backend not in named and named == sorted(named)
    with pytest.raises(SpecError) as refused:
        compile_job(parse_spec(_raw(_model(tmp_path), backend, loss_agg=mode)), get_plugins().backends.get(backend),
                    tmp_path / "refused")
    assert refused.value.problems == lines


def test_openrlhfs_gspo_takes_only_its_own_aggregation(tmp_path: Path) -> None:
    lines = problems(tmp_path, "openrlhf", name="gspo", loss_agg="token_mean")
    assert lines == ["algorithm.loss_agg: openrlhf cannot run gspo with loss_agg token_mean (OpenRLHF's gspo "
                     "policy loss is always seq-mean-token-mean); backends that can: slime, trl, verl"]
    assert problems(tmp_path / "smtm", "openrlhf", name="gspo", loss_agg="seq_mean_token_mean") == []


def test_an_override_of_the_same_key_still_wins(tmp_path: Path) -> None:
    raw = _raw(_model(tmp_path), "verl", entropy_coef=0.01)
    raw["backend"]["overrides"] = {"actor_rollout_ref.actor.entropy_coeff": 0.5}
    job = compile_job(parse_spec(raw), get_plugins().backends.get("verl"), tmp_path / "job")
    assert flatten(yaml.safe_load((job.path / "agentbridge_job.yaml").read_text()))[
        "actor_rollout_ref.actor.entropy_coeff"] == 0.5


@pytest.mark.parametrize("algorithm, where", [
    ({"entropy_coef": float("nan")}, "entropy_coef"),
    ({"entropy_coef": float("inf")}, "entropy_coef"),
    ({"entropy_coef": -0.1}, "entropy_coef"),
    ({"entropy_coef": 2.0}, "entropy_coef"),
    ({"entropy_coef": True}, "entropy_coef"),
    ({"max_grad_norm": 0}, "max_grad_norm"),
    ({"max_grad_norm": float("inf")}, "max_grad_norm"),
    ({"max_grad_norm": 1e300}, "max_grad_norm"),
    ({"clip": {"low": 1.0}}, "clip.low"),
    ({"clip": {"low": 0}}, "clip.low"),
    ({"clip": {"high": float("nan")}}, "clip.high"),
    ({"clip": {"high": 1e9}}, "clip.high"),
    ({"clip": {"dual": 1.0}}, "clip.dual"),
    ({"clip": {"dual": float("inf")}}, "clip.dual"),
    ({"clip": {"dual": 1.1}}, "clip.dual"),                 # not above 1 + the preset's high (0.2)
    ({"clip": {"high": 0.5, "dual": 1.4}}, "clip.dual"),    # not above 1 + high
    ({"clip": {"width": 0.1}}, "clip.width"),
    ({"loss_agg": "token-mean"}, "loss_agg"),
])
def test_bad_recipe_values_are_refused(algorithm: dict[str, Any], where: str) -> None:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw["algorithm"].update(algorithm)
    with pytest.raises(SpecError) as refused:
        parse_spec(raw)
    assert any(where in line for line in refused.value.problems), refused.value.problems


def test_the_schema_documents_each_recipe_field() -> None:
    defs = json_schema()["$defs"]
    for field in RECIPE_FIELDS:
        assert defs["AlgorithmSpec"]["properties"][field].get("description"), field
    for field in ("low", "high", "dual"):
        assert defs["ClipSpec"]["properties"][field].get("description"), field


# algorithm.scale_advantages (on grpo) -> the native setting, or None: refused
SCALE_NATIVE: dict[str, dict[str, dict[str, Any] | None]] = {
    "trl": {"group": {"scale_rewards": "group"}, "batch": {"scale_rewards": "batch"},
            "none": {"scale_rewards": "none"}},
    "verl": {"group": {"algorithm.norm_adv_by_std_in_grpo": True}, "batch": None,
             "none": {"algorithm.norm_adv_by_std_in_grpo": False}},
    "openrlhf": {"group": {"algo.advantage.estimator": "group_norm"}, "batch": None,
                 "none": {"algo.advantage.estimator": "dr_grpo"}},
    "rlinf": {"group": {"algorithm.adv_type": "grpo"}, "batch": None, "none": None},
    "slime": {"group": {"disable-grpo-std-normalization": None}, "batch": None,
              "none": {"disable-grpo-std-normalization": True}},
    "roll": {"group": {"reward_normalization.norm_std_type": "group"},
             "batch": {"reward_normalization.norm_std_type": "batch", "reward_normalization.norm_mean_type": "group"},
             "none": {"reward_normalization.norm_std_type": None}},
}
# epochs 2 and mini_batches 2 (of batch_size 2, group_size 4, one GPU) -> the native settings, or None: refused
UPDATES_NATIVE: dict[str, dict[str, Any] | None] = {
    "trl": {"num_iterations": 2, "steps_per_generation": 2, "gradient_accumulation_steps": 1},
    "verl": {"actor_rollout_ref.actor.ppo_epochs": 2, "actor_rollout_ref.actor.ppo_mini_batch_size": 1},
    "openrlhf": {"train.max_epochs": "2", "train.batch_size": "4"},
    "rlinf": None, "slime": None,
    "roll": {"ppo_epochs": 2, "actor_train.training_args.gradient_accumulation_steps": 4},
}


def _native_or_refused(tmp_path: Path, backend: str, expected: dict[str, Any] | None, field: str,
                       **algorithm: Any) -> None:
    if expected is not None:
        assert problems(tmp_path, backend, **algorithm) == []
        _expect(native(tmp_path, backend, **algorithm), expected, backend)
        return
    lines = problems(tmp_path, backend, **algorithm)
    assert len(lines) == 1 and lines[0].startswith(f"algorithm.{field}: {backend} cannot run grpo with "), lines
    assert "backends that can: " in lines[0] and backend not in lines[0].split("backends that can: ")[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantage_scaling_reaches_the_backend_or_is_refused_in_one_line(tmp_path: Path, backend: str,
                                                                        scale: str) -> None:
    _native_or_refused(tmp_path, backend, SCALE_NATIVE[backend][scale], "scale_advantages", scale_advantages=scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_epochs_and_mini_batches_reach_the_backend_or_are_refused(tmp_path: Path, backend: str) -> None:
    _native_or_refused(tmp_path, backend, UPDATES_NATIVE[backend], "epochs", epochs=2, mini_batches=2)


@pytest.mark.parametrize("backend, expected", [
    ("rlinf", {"algorithm.n_minibatches": 2}), ("slime", {"global-batch-size": 4}),
    ("verl", {"actor_rollout_ref.actor.ppo_mini_batch_size": 1, "actor_rollout_ref.actor.ppo_epochs": None})])
def test_mini_batches_alone_reach_backends_without_epochs(tmp_path: Path, backend: str,
                                                           expected: dict[str, Any]) -> None:
    _native_or_refused(tmp_path, backend, expected, "mini_batches", mini_batches=2)


@pytest.mark.parametrize("algorithm, message", [
    ({"name": "rloo", "scale_advantages": "none"}, "scale_advantages applies to the group-normalised presets"),
    ({"mini_batches": 3}, "mini_batches (3) must divide batch_size (2)"),
    ({"epochs": 0}, "epochs"), ({"epochs": 1000}, "epochs")])
def test_recipe_fields_that_cannot_hold_are_one_line(tmp_path: Path, algorithm: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(_raw(_model(tmp_path), "verl", **algorithm))
    assert len(refused.value.problems) == 1 and message in refused.value.problems[0]


LORA = {"rank": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
# model.lora -> the native settings, or None: refused (TRL trains it through PEFT in its entry: tests/test_trl_lora.py)
LORA_NATIVE: dict[str, dict[str, Any] | None] = {
    "verl": {"actor_rollout_ref.model.lora_rank": 16, "actor_rollout_ref.model.lora_alpha": 32.0,
             "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"]},
    "roll": {"actor_train.model_args.lora_target": "q_proj,v_proj", "actor_train.model_args.lora_rank": 16,
             "actor_train.model_args.lora_alpha": 32.0, "actor_train.model_args.lora_dropout": 0.0},
    "openrlhf": None, "rlinf": None, "slime": None,
    "trl": {},  # peft_config, built by the job's entry from spec.yaml (adapters/trl/tests/test_trl_lora.py)
}


def _lora_raw(tmp_path: Path, backend: str, lora: dict[str, Any]) -> dict[str, Any]:
    raw = _raw(_model(tmp_path), backend)
    raw["model"]["lora"] = lora
    return raw


@pytest.mark.parametrize("backend", sorted(LORA_NATIVE))
def test_lora_reaches_the_backend_or_is_refused_in_one_line(tmp_path: Path, backend: str) -> None:
    if backend not in get_plugins().backends:
        pytest.skip(f"the {backend} adapter is not installed here")
    spec = parse_spec(_lora_raw(tmp_path, backend, LORA))
    adapter = get_plugins().backends.get(backend)
    lines = [str(p) for p in adapter.check(spec)]
    expected = LORA_NATIVE[backend]
    if expected is None:
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"model.lora: {backend} cannot run grpo with model.lora (")
        assert "backends that can: " in lines[0] and all(b in lines[0] for b in ("roll", "trl", "verl"))
        return
    assert lines == []
    job = compile_job(spec, adapter, tmp_path / "job")
    if backend == "trl":
        assert yaml.safe_load((job.path / "spec.yaml").read_text())["model"]["lora"]["rank"] == 16
        assert any(n.startswith("model.lora: the warm start") for n in job.manifest["notes"])
    else:
        name = {"verl": "agentbridge_job.yaml", "roll": "roll_job.yaml"}[backend]
        _expect(flatten(yaml.safe_load((job.path / name).read_text())), expected, backend)
    assert job.manifest["spec_hash"] != compile_job(parse_spec(_raw(_model(tmp_path), backend)), adapter,
                                                    tmp_path / "plain").manifest["spec_hash"]


def test_lora_defaults_and_bounds(tmp_path: Path) -> None:
    spec = parse_spec(_lora_raw(tmp_path, "roll", {"rank": 8}))
    assert spec.model.lora is not None and spec.model.lora.scaling_alpha() == 16.0
    assert spec.model.lora.target_modules == "all-linear"
    job = compile_job(spec, get_plugins().backends.get("roll"), tmp_path / "job")
    assert flatten(yaml.safe_load((job.path / "roll_job.yaml").read_text()))[
        "actor_train.model_args.lora_target"] == "all"
    for bad in ({"rank": 0}, {"rank": 8, "dropout": 1.5}, {"rank": 8, "target_modules": []},
                {"rank": 8, "target_modules": [""]}, {"rank": 8, "alpha": float("nan")}):
        with pytest.raises(SpecError):
            parse_spec(_lora_raw(tmp_path, "roll", bad))
    assert "lora" not in load_spec("examples/calculator.yaml").model.model_dump()  # hashes of specs without it stay


def test_verl_refuses_lora_dropout_it_cannot_set(tmp_path: Path) -> None:
    if "verl" not in get_plugins().backends:
        pytest.skip("the verl adapter is not installed here")
    spec = parse_spec(_lora_raw(tmp_path, "verl", {**LORA, "dropout": 0.05}))
    (line,) = [str(p) for p in get_plugins().backends.get("verl").check(spec)]
    assert line.startswith("model.lora: verl cannot run grpo with model.lora (veRL 0.9.1's FSDP LoRA has no dropout")
