"""compile and check: the job directory, its rows, its flags and scripts; capability errors; the plugin stays light
(no slime, Ray or torch at import). Runs without slime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slime_testkit import EXAMPLE, ROOT, SMALL, compile_job

from agentbridge.adapter import TASK_KEY, decode_task
from agentbridge.backends import Backend, Job, known_capabilities
from agentbridge.backends import compile_job as pipeline_compile
from agentbridge.plugins import get_plugins
from agentbridge.spec import SpecError, load_spec
from agentbridge_slime import SLIME_COMMIT
from agentbridge_slime.args import job_argv
from agentbridge_slime.backend import SlimeBackend
from agentbridge_slime.config import argv


def test_registered_and_implements_the_protocol() -> None:
    backend = get_plugins().backends.get("slime")
    assert isinstance(backend, SlimeBackend) and isinstance(backend, Backend)
    caps = backend.capabilities()
    assert caps.algorithms == ["dapo", "dr_grpo", "grpo", "gspo", "ppo", "reinforce_pp"]
    assert not caps.multimodal and not caps.turn_credit and not caps.cpu_training
    assert caps.verified_upstream == f"THUDM/slime@{SLIME_COMMIT}" and len(SLIME_COMMIT) == 40


def test_rloo_is_one_line_naming_who_can() -> None:
    problems = SlimeBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=rloo"]))
    assert len(problems) == 1 and "\n" not in str(problems[0])
    line = str(problems[0])
    assert line.startswith("algorithm.name: slime cannot run 'rloo' (it runs dapo, dr_grpo, grpo, gspo, ppo, "
                           "reinforce_pp)")
    can = sorted(n for n, c in known_capabilities().items() if "rloo" in c.algorithms and n != "slime")
    assert {"openrlhf", "verl"} <= set(can) and f"backends that can: {', '.join(can)}" in line
    assert "no leave-one-out baseline" in line
    with pytest.raises(SpecError) as e:  # the compile pipeline refuses it before writing anything
        pipeline_compile(load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=rloo"]), SlimeBackend(),
                         ROOT / "jobs" / "never-written")
    assert [p for p in e.value.problems if p.startswith("algorithm.name")] == [line]
    assert not (ROOT / "jobs" / "never-written").exists()


@pytest.mark.parametrize(("sets", "expected"), [
    ([], []),
    (["backend.options.lr_warmup=3"], ["backend.options.lr_warmup: unknown slime option"]),
    (["algorithm.name=grpo", "algorithm.group_size=1"], ["algorithm.group_size: grpo computes advantages"]),
    (["backend.options.micro_batch_size=abc"], ["backend.options.micro_batch_size: must be a positive integer"]),
    (["backend.options.gpu_memory_utilization=1.5"], ["backend.options.gpu_memory_utilization: must be a number"]),
    (["backend.options.colocate=maybe"], ["backend.options.colocate: must be true or false"]),
    (["agent.sampling.top_p=0.9"], ["agent.sampling.top_p: must be 1.0 on slime"]),
    (["backend.name=trl", "backend.options.lr_warmup=3"], []),  # another backend's options are not checked here
])
def test_check(sets: list[str], expected: list[str]) -> None:
    problems = [str(p) for p in SlimeBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, *sets]))]
    assert len(problems) == len(expected)
    assert all(p.startswith(e) for p, e in zip(problems, expected, strict=True)), problems


def test_compile_writes_a_self_contained_job(small_job: Job) -> None:
    for name in ("manifest.json", "spec.yaml", "slime_job.yaml", "agentbridge.yaml", "launch.sh", "submit.sh",
                 "data/train.jsonl", "data/eval.jsonl"):
        assert (small_job.path / name).is_file(), name
    manifest = json.loads((small_job.path / "manifest.json").read_text())
    assert manifest["backend"] == "slime" and manifest["versions"]["agentbridge-slime"] == "0.1.0"
    assert manifest["upstream"] == f"THUDM/slime@{SLIME_COMMIT}" and manifest["tasks"] == {"train": 8, "eval": 4}
    assert yaml.safe_load((small_job.path / "agentbridge.yaml").read_text()) == {"agentbridge_spec": "spec.yaml"}
    launch = (small_job.path / "launch.sh").read_text()
    assert '"$PYTHON" -m agentbridge_slime.args "$ROOT" --model "$MODEL"' in launch
    assert '--run-dir "$RUN_DIR" --load "${LOAD:-}" --ref-load "${REF_LOAD:-}"' in launch
    assert '"$PYTHON" "$SLIME_DIR/train.py" "${MODEL_ARGS[@]}" "${ARGS[@]}" "$@"' in launch
    assert "SLIME_DIR:?set SLIME_DIR" in launch and "# NOTE: backend.options.model_script is not set" in launch
    submit = (small_job.path / "submit.sh").read_text()
    assert "ray job submit" in submit and '--working-dir "$JOB"' in submit and "ROOT=." in submit
    for script in ("launch.sh", "submit.sh"):  # bash parses both
        assert subprocess.run(["bash", "-n", str(small_job.path / script)]).returncode == 0


def test_rows_carry_the_task(small_job: Job) -> None:
    rows = [json.loads(line) for line in (small_job.path / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    row = rows[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["label"]
    task = decode_task(row["metadata"].get(TASK_KEY), "slime")
    assert task.prompt == row["prompt"][1]["content"] and task.id == row["label"] and task.data["answer"]
    with pytest.raises(ValueError, match="carries no agentbridge task"):
        decode_task("42", "slime")
    with pytest.raises(ValueError, match="carries no agentbridge task"):
        decode_task(None, "slime")


def test_flags_map_the_spec(small_job: Job) -> None:
    flags = yaml.safe_load((small_job.path / "slime_job.yaml").read_text())
    spec = load_spec(small_job.path / "spec.yaml")
    agent = spec.agent
    assert flags["custom-generate-function-path"] == "agentbridge_slime.rollout.generate"
    assert flags["custom-config-path"] == "${ROOT}/agentbridge.yaml"
    assert flags["prompt-data"] == "${ROOT}/data/train.jsonl" and flags["hf-checkpoint"] == "${MODEL}"
    assert (flags["input-key"], flags["label-key"], flags["metadata-key"]) == ("prompt", "label", "metadata")
    assert flags["rollout-batch-size"] == 2 and flags["n-samples-per-prompt"] == 4 and flags["global-batch-size"] == 8
    assert flags["rollout-max-prompt-len"] == agent.max_prompt_tokens
    assert flags["rollout-max-response-len"] == agent.max_response_tokens
    assert flags["rollout-max-context-len"] == agent.max_prompt_tokens + agent.max_response_tokens
    assert flags["rollout-temperature"] == agent.sampling.temperature and flags["num-rollout"] == spec.algorithm.steps
    assert flags["use-rollout-logprobs"] is True and flags["apply-chat-template"] is True
    assert "rm-type" not in flags and "use-kl-loss" not in flags  # the driver scores; no KL
    assert flags["ref-load"] == "${REF_LOAD}"  # the model: slime's fallback for load, and the KL reference


@pytest.mark.parametrize(("algo", "kl", "expected", "absent"), [
    ("grpo", 0.0, {"advantage-estimator": "grpo", "eps-clip": 0.2}, ["eps-clip-high", "use-kl-loss", "kl-coef"]),
    ("grpo", 0.05, {"use-kl-loss": True, "kl-loss-coef": 0.05, "kl-loss-type": "low_var_kl",
                    "ref-load": "${REF_LOAD}"}, ["kl-coef"]),
    ("dr_grpo", 0.0, {"disable-grpo-std-normalization": True,
                      "custom-pg-loss-reducer-function-path": "agentbridge_slime.reducers.dr_grpo_pg_loss_reducer"},
     []),
    ("dapo", 0.0, {"eps-clip-high": 0.28, "calculate-per-token-loss": True, "over-sampling-batch-size": 2,
                   "dynamic-sampling-filter-path":
                       "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"}, []),
    ("gspo", 0.0, {"advantage-estimator": "gspo", "eps-clip": 3e-4, "eps-clip-high": 4e-4}, []),
    ("reinforce_pp", 0.05, {"advantage-estimator": "reinforce_plus_plus", "normalize-advantages": True,
                            "kl-coef": 0.05}, ["use-kl-loss"]),
    ("ppo", 0.0, {"advantage-estimator": "ppo", "gamma": 1.0, "lambd": 0.95}, []),
])
def test_algorithm_flags(tmp_path: Path, algo: str, kl: float, expected: dict[str, object],
                         absent: list[str]) -> None:
    job = compile_job(tmp_path / "job", f"algorithm.name={algo}", f"algorithm.kl_coef={kl}")
    flags = yaml.safe_load((job.path / "slime_job.yaml").read_text())
    assert {k: flags.get(k) for k in expected} == expected
    assert not [k for k in absent if k in flags]


def test_overrides_and_options_apply_only_to_slime(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "mine", "backend.options.micro_batch_size=2",
                      "backend.options.model_script=qwen2.5-3B",
                      "backend.overrides={eps_clip_high: 0.3, --use-dynamic-batch-size: true, rollout-shuffle: false}")
    flags = yaml.safe_load((job.path / "slime_job.yaml").read_text())
    assert flags["eps-clip-high"] == 0.3 and flags["use-dynamic-batch-size"] is True and "rollout-shuffle" not in flags
    assert flags["micro-batch-size"] == 2
    assert 'then MODEL_ARGS_FILE="${SLIME_DIR}"/scripts/models/qwen2.5-3B.sh; fi' in (
        job.path / "launch.sh").read_text()
    other = compile_job(tmp_path / "other", "backend.name=trl", "backend.overrides={eps-clip-high: 0.3}")
    assert yaml.safe_load((other.path / "slime_job.yaml").read_text()).get("eps-clip-high") == 0.28  # dapo's
    assert any("not applied to the slime job" in n for n in other.manifest["notes"])


def test_the_arguments_launch_sh_passes(small_job: Job) -> None:
    args = job_argv(small_job.path, "/models/m", "/runs/r")
    assert args[:2] == ["--actor-num-nodes", "1"] and "--colocate" in args and "--bf16" in args
    i = args.index("--prompt-data")
    assert args[i + 1] == f"{small_job.path}/data/train.jsonl"
    assert args[args.index("--hf-checkpoint") + 1] == "/models/m" == args[args.index("--load") + 1]
    assert args[args.index("--save") + 1] == "/runs/r/checkpoints"
    assert args[args.index("--ref-load") + 1] == "/models/m"
    assert not any("${" in a for a in args)
    assert argv({"a": True, "b": False, "c": None, "d": [1, "${X}"]}, {"X": "x"}) == ["--a", "--d", "1", "x"]
    out = subprocess.run([sys.executable, "-m", "agentbridge_slime.args", str(small_job.path), "--model", "/models/m",
                          "--run-dir", "/runs/r", "--load", "", "--ref-load", ""],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split("\0")[:-1] == args
    bad = subprocess.run([sys.executable, "-m", "agentbridge_slime.args", str(small_job.path / "data"), "--model",
                          "m", "--run-dir", "r"], capture_output=True, text=True)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "slime_job.yaml" in bad.stderr


def test_compile_and_the_plugin_stay_light() -> None:
    code = ("import sys; from agentbridge.plugins import get_plugins; get_plugins().backends.get('slime'); "
            "heavy = [m for m in ('slime', 'ray', 'torch', 'transformers', 'sglang') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_no_environment_recipe_from_the_package_index() -> None:
    from agentbridge import backend_envs

    with pytest.raises(ValueError) as e:  # slime is not on the package index: said in one line, not tried
        backend_envs.recipe("slime", cpu=True, plugins=[])
    assert "\n" not in str(e.value) and "THUDM/slime" in str(e.value) and "PYTHONPATH" in str(e.value)
    assert "agentbridge-slime" not in backend_envs.plugin_distributions()  # never installed as another's plugin


def test_validate_without_slime_says_how_in_one_line(small_job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentbridge_slime.backend as backend

    monkeypatch.setattr(backend, "backend_python", lambda name, module: None)  # no slime anywhere
    (line,) = [str(p) for p in SlimeBackend().validate(small_job).problems]
    assert line.startswith("slime: slime does not import here") and "AGENTBRIDGE_SLIME_PYTHON" in line
    assert "THUDM/slime@624b824" in line and "\n" not in line


def test_backends_says_how_each_backend_was_verified() -> None:
    from click.testing import CliRunner

    from agentbridge.backends import Capabilities, verification
    from agentbridge.cli import main

    result = CliRunner().invoke(main, ["backends"], terminal_width=400)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(x.startswith(f"slime: verified against upstream THUDM/slime@{SLIME_COMMIT}, outside this "
                            "repository's CI") for x in lines)
    assert "│ upstream" in next(x for x in lines if x.startswith("│ slime"))  # the table's column (wrapped)
    for name, caps in known_capabilities().items():  # each installed adapter says it of itself
        if caps.verified_in_ci:
            assert any(x.startswith(f"{name}: verified in this repository's CI against its own code") for x in lines)
    assert verification(Capabilities(algorithms=[], verified_in_ci=True))[0] == "this CI"
    assert verification(Capabilities(algorithms=[]))[0] == "not stated"


def test_launch_sh_runs_slimes_train_py_with_the_jobs_flags(small_job: Job, tmp_path: Path) -> None:
    """launch.sh end to end, with a train.py that records its arguments in place of slime's (which needs GPUs)."""
    slime_dir = tmp_path / "slime"
    (slime_dir / "scripts" / "models").mkdir(parents=True)
    (slime_dir / "train.py").write_text("import json, os, sys\nprint(json.dumps({'argv': sys.argv[1:], "
                                        "'run': os.environ['AGENTBRIDGE_RUN_DIR']}))\n")
    models = tmp_path / "model_args.sh"
    models.write_text("MODEL_ARGS=(--num-layers 2 --hidden-size 64)\n")
    model = tmp_path / "m"  # a local model directory (--hf-checkpoint; a hub id is downloaded first)
    model.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "SLIME_DIR": str(slime_dir), "MODEL": str(model),
           "RUN_DIR": str(tmp_path / "run"), "MODEL_ARGS_FILE": str(models),
           "AGENTBRIDGE_PHASES": "off"}  # the trainer alone (tests/test_phases.py runs the arms around it)
    out = subprocess.run(["bash", str(small_job.path / "launch.sh"), "--extra-flag"], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    expected = job_argv(small_job.path, str(model), str(tmp_path / "run"))
    assert seen["argv"] == ["--num-layers", "2", "--hidden-size", "64", *expected, "--extra-flag"]
    assert seen["run"] == str(tmp_path / "run")
    missing = subprocess.run(["bash", str(small_job.path / "launch.sh")], capture_output=True, text=True,
                             env={k: v for k, v in env.items() if k != "SLIME_DIR"})
    assert missing.returncode != 0 and "set SLIME_DIR to a checkout of THUDM/slime" in missing.stderr


def slime_load_decision(args: list[str]) -> dict[str, object]:
    """What slime does with the job's ``--load`` / ``--ref-load`` / ``--save*`` flags: a transcription of
    ``slime_validate_args`` (slime/utils/arguments.py at THUDM/slime@624b824: ``load_is_megatron``, ``load_is_hf``,
    ``load = ref_load`` otherwise, the ``--save`` assertion) and of when train.py saves
    (``should_run_periodic_action(rollout_id, save_interval, ..., num_rollout)``), for CI, where slime does not import
    (``test_slime_validate.py`` runs slime's own on the same job). HF loading is taken as supported (qwen2, llama, ...:
    ``hf_to_megatron.supports_hf_weight_loading``)."""
    def flag(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    load, ref_load, save, interval = flag("--load"), flag("--ref-load"), flag("--save"), flag("--save-interval")
    megatron = load is not None and os.path.exists(os.path.join(load, "latest_checkpointed_iteration.txt"))
    hf = load is not None and os.path.isdir(load) and os.path.exists(os.path.join(load, "config.json"))
    if not megatron and not hf:
        load = ref_load
    assert interval is None or save is not None, "'--save' is required when save_interval is set."
    rollouts = int(flag("--num-rollout") or 0)
    saved = [] if interval is None else [i for i in range(rollouts)
                                         if i == rollouts - 1 or (i + 1) % int(interval) == 0]
    return {"load": load, "resume": megatron, "saved": saved, "save_hf": flag("--save-hf")}


def test_the_job_saves_its_model_and_resumes(tmp_path: Path) -> None:
    """save, save-interval, save-hf, load and ref-load as slime reads them: a fresh run loads the model's HF weights and
    saves every 50 rollouts and the last, each as a HF model; a relaunch loads the save directory and resumes."""
    job = compile_job(tmp_path / "job", "algorithm.steps=120", "algorithm.kl_coef=0.05")
    model, run = tmp_path / "model", tmp_path / "run"
    model.mkdir()
    (model / "config.json").write_text("{}")
    fresh = slime_load_decision(job_argv(job.path, str(model), str(run)))
    assert fresh == {"load": str(model), "resume": False, "saved": [49, 99, 119],
                     "save_hf": f"{run}/hf/rollout_{{rollout_id}}"}
    args = job_argv(job.path, str(model), str(run))
    assert args[args.index("--ref-load") + 1] == str(model) and args[args.index("--save") + 1] == f"{run}/checkpoints"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("99")  # what Megatron's save writes
    resumed = slime_load_decision(job_argv(job.path, str(model), str(run)))
    assert resumed["load"] == f"{run}/checkpoints" and resumed["resume"]
    assert job_argv(job.path, str(model), str(run), load="/elsewhere")[args.index("--load") + 1] == "/elsewhere"
    hub = slime_load_decision(job_argv(job.path, "Qwen/Qwen2.5-3B-Instruct", str(tmp_path / "other")))
    assert hub["load"] == "Qwen/Qwen2.5-3B-Instruct"  # not a directory: launch.sh downloads it before (MODEL)
    assert 'if [ ! -d "$MODEL" ]; then MODEL="$("$PYTHON" -c' in (job.path / "launch.sh").read_text()
    bad = compile_job(tmp_path / "bad", "backend.options.save_interval=0")
    assert any("save_interval" in str(p) for p in SlimeBackend().check(load_spec(bad.path / "spec.yaml")))
