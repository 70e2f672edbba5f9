"""Nothing from a spec reaches a shell unquoted: hostile model paths, reward-model paths and override values,
compiled for every backend, give scripts that parse (``bash -n``), whose variables hold the values verbatim, and
that execute nothing they hold."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbridge import adapter as kit
from agentbridge.backends import compile_job
from agentbridge.plugins import get_plugins
from agentbridge.spec import load_spec

BACKENDS = ["trl", "verl", "openrlhf", "rlinf", "slime", "roll"]
# each would run `touch PWNED` (or write a file) if the shell expanded it
HOSTILE = [
    "m$(touch PWNED)",
    "m`touch PWNED`",
    "it's a model",
    'say "hi" $(touch PWNED)',
    "a${IFS}b${PATH:+$(touch PWNED)}",
    "line\n$(touch PWNED)",
    "semi; touch PWNED #",
    "modèle-中文-\\-$HOME",
    "'; touch PWNED; echo '",
    "-- --flag",
]
SMALL = {"data": {"train": {"id": "math/arithmetic", "split": "train", "size": 8, "seed": 0},
                  "eval": {"id": "math/arithmetic", "split": "eval", "size": 4, "seed": 0}},
         "algorithm": {"name": "grpo", "group_size": 4, "batch_size": 2, "lr": 1.0e-5, "steps": 2}}
ASSIGNMENT = re.compile(r'^if \[ -z "\$\{(\w+):-\}" \]; then \1=')


def _model_dir(root: Path, name: str) -> Path:
    """A directory named ``name`` that looks like a model (its config.json)."""
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _spec_file(tmp_path: Path, model: Path, backend: str, **extra: object) -> Path:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw.update(SMALL, model={"path": str(model), "tool_call_format": "hermes"}, resources={"nodes": 1,
               "gpus_per_node": 1})
    raw["backend"] = {"name": backend, **extra}
    raw["algorithm"]["warm_start"] = None
    path = tmp_path / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw))
    return path


def _prologue(script: Path) -> str:
    """The script's variable assignments: every default line and every ``NAME=(...)`` array."""
    keep: list[str] = []
    until = None  # the end of the assignment being read: a quoted value may span lines
    for line in script.read_text().splitlines():
        if until is None and ASSIGNMENT.match(line):
            until = "; fi"
        elif until is None and re.match(r"^\w+=\($", line):
            until = ")"
        if until is not None:
            keep.append(line)
            if line.endswith(until) and (until != ")" or line == ")"):
                until = None
    return "\n".join(keep)


def _run_prologue(script: Path, sandbox: Path, names: list[str]) -> dict[str, str]:
    """The prologue run by bash in ``sandbox`` (``$PYTHON`` a command that must not run), then the values of
    ``names`` printed as JSON by Python from the environment bash exports."""
    body = "set -euo pipefail\nPYTHON=/bin/false\nJOB=job\nOUT=/o\n" + _prologue(script) + "\n"
    body += "".join(f'export {n}="${{{n}:-}}"\n' for n in names)
    body += "exec env -0\n"
    out = subprocess.run(["bash", "-c", body], cwd=sandbox, capture_output=True, check=True,
                         env={"PATH": os.environ["PATH"], "HOME": str(sandbox)}).stdout.decode()
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {n: env.get(n, "") for n in names}


@given(st.text(min_size=0, max_size=40))
@settings(max_examples=300, deadline=None)
def test_shell_quote_gives_back_any_text_exactly(text: str) -> None:
    text = text.replace("\0", "")  # no shell variable or argument can hold NUL
    script = f"X={kit.shell_quote(text)}\nprintf %s \"$X\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.decode("utf-8", "surrogateescape") == text


@given(st.text(alphabet=st.sampled_from("ab$(){}`'\"\\;\n @"), max_size=20))
@settings(max_examples=200, deadline=None)
def test_placeholders_become_variables_and_the_rest_stays_literal(text: str) -> None:
    word = kit.shell_quote(f"{text}@OUT@{text}", {"@OUT@": "OUT"})
    out = subprocess.run(["bash", "-c", f'OUT="o u t"\nprintf %s {word}'], capture_output=True, check=True).stdout
    assert out.decode() == f"{text}o u t{text}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_model_paths_reach_every_backends_scripts_as_data(tmp_path: Path, backend: str) -> None:
    if backend not in get_plugins().backends:
        pytest.skip(f"the {backend} adapter is not installed here")
    impl = get_plugins().backends.get(backend)
    for i, name in enumerate(HOSTILE):
        case = tmp_path / f"case{i}"
        model = _model_dir(case / "models", name.replace("/", "_"))
        extra: dict[str, object] = {}
        if backend == "openrlhf":  # override values with the script's placeholders in them
            extra = {"overrides": {"ckpt.output_dir": f"@OUT@/ckpt{name}", "data.prompt_data": f"@JOB@/{name}"}}
        spec = load_spec(_spec_file(case, model, backend, **extra))
        job = impl.compile(spec, case / "job")
        sandbox = case / "sandbox"
        sandbox.mkdir()
        for script in ("launch.sh", "submit.sh"):
            path = job.path / script
            check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert check.returncode == 0, f"{backend} {script} with model {name!r}: {check.stderr}"
            if script == "submit.sh" and backend != "openrlhf":
                continue  # the others' submit.sh name no model: they run launch.sh on the cluster
            values = _run_prologue(path, sandbox, ["MODEL"])
            assert not list(sandbox.iterdir()), f"{backend} {script}: the prologue ran something: " \
                                                f"{list(sandbox.iterdir())}"
            if backend != "trl":  # TRL's scripts read the model from spec.yaml in Python, not from the shell
                assert values["MODEL"] == str(model), (backend, script, name)
        if backend == "openrlhf":  # the trainer's argv as the script passes it: the values verbatim
            argv = subprocess.run(["bash", str(job.path / "launch.sh"), "--print-args"], cwd=sandbox,
                                  capture_output=True, check=True, env={**os.environ, "OUT": "/o"}).stdout
            args = argv.decode().split("\0")
            assert args[args.index("--ckpt.output_dir") + 1] == f"/o/ckpt{name}"
            assert args[args.index("--actor.model_name_or_path") + 1] == str(model)
            assert not list(sandbox.iterdir())


def test_a_served_reward_models_hostile_path_is_quoted_too(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "models", "m$(touch PWNED)")
    rm = _model_dir(tmp_path / "models", "rm`touch PWNED`'")
    for backend in ("verl", "openrlhf"):
        if backend not in get_plugins().backends:
            continue
        spec_path = _spec_file(tmp_path / backend, model, backend)
        raw = yaml.safe_load(spec_path.read_text())
        raw["reward"].append({"id": "core/reward_model", "weight": 0.5, "args": {"path": str(rm), "serve": "backend"}})
        spec_path.write_text(yaml.safe_dump(raw))
        job = get_plugins().backends.get(backend).compile(load_spec(spec_path), tmp_path / backend / "job")
        sandbox = tmp_path / backend / "sandbox"
        sandbox.mkdir()
        variable = "RM_MODEL" if backend == "verl" else "RM"
        values = _run_prologue(job.path / "launch.sh", sandbox, [variable])
        assert values[variable] == str(rm) and not list(sandbox.iterdir())


def test_slime_refuses_a_model_script_that_is_not_a_script_name(tmp_path: Path) -> None:
    if "slime" not in get_plugins().backends:
        pytest.skip("the slime adapter is not installed here")
    model = _model_dir(tmp_path / "models", "m")
    bad = _spec_file(tmp_path, model, "slime", options={"model_script": "qwen$(touch PWNED)"})
    problems = get_plugins().backends.get("slime").check(load_spec(bad))
    assert any("model_script" in str(p) for p in problems), problems
    good = load_spec(_spec_file(tmp_path / "ok", model, "slime", options={"model_script": "qwen2.5-3B"}))
    job = get_plugins().backends.get("slime").compile(good, tmp_path / "job")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    body = ("SLIME_DIR='/s d'\n" + "\n".join(line for line in (job.path / "launch.sh").read_text().splitlines()
                                              if line.startswith("if [ -z \"${MODEL_ARGS_FILE")) +
            '\nprintf %s "$MODEL_ARGS_FILE"')
    assert subprocess.run(["bash", "-c", body], capture_output=True, text=True, check=True).stdout == \
        "/s d/scripts/models/qwen2.5-3B.sh"


def test_the_jobs_spec_keeps_the_model_path_verbatim(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "models", HOSTILE[0])
    spec = load_spec(_spec_file(tmp_path, model, "trl"))
    job = compile_job(spec, get_plugins().backends.get("trl"), tmp_path / "job")
    assert load_spec(job.path / "spec.yaml").model.path == str(model)
    assert json.loads((job.path / "manifest.json").read_text())["kind"] == "job"
