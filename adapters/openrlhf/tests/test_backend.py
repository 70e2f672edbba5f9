"""Compile, launch flags, algorithm mapping and spec checks (none of these need OpenRLHF at run time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.config import openrlhf_flags
from agentbridge_openrlhf.validate import dump_flags, job_argv

CALC = "examples/calculator.yaml"
OURS = "backend.name=openrlhf"  # backend.options / overrides apply only to the spec's own backend


def test_plugin_registers_backend_without_importing_openrlhf_or_torch() -> None:
    code = ("import sys; from agentbridge.plugins import get_plugins; b = get_plugins().backends.get('openrlhf'); "
            "from agentbridge.spec import load_spec; from pathlib import Path; import tempfile; "
            f"b.compile(load_spec('{CALC}'), Path(tempfile.mkdtemp()) / 'j'); "
            "print(type(b).__name__, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('openrlhf', 'torch', 'ray', 'vllm', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "OpenRLHFBackend []"


def test_shipped_flag_table_matches_the_installed_parser() -> None:
    """The table check() uses must be OpenRLHF 0.11.2's: a version drift shows up here."""
    installed = json.loads(json.dumps(dump_flags(), default=str))
    assert installed == openrlhf_flags()
    assert "train.agent_func_path" in installed and "agent_func_path" not in installed


def test_compile_writes_the_job(calculator_job: Path) -> None:
    names = {p.name for p in calculator_job.iterdir()}
    assert {"manifest.json", "spec.yaml", "agentbridge_agent.py", "launch.sh", "submit.sh", "data"} <= names
    rows = [json.loads(line) for line in (calculator_job / "data/train.jsonl").read_text().splitlines()]
    assert len(rows) == 2000 and (calculator_job / "data/eval.jsonl").is_file()
    task = json.loads(rows[0]["label"])  # the task travels as a JSON string
    assert isinstance(rows[0]["label"], str) and set(task) == {"id", "prompt", "data"} and "answer" in task["data"]
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["prompt"][-1]["content"] == task["prompt"]
    agent = (calculator_job / "agentbridge_agent.py").read_text()
    assert "class AgentExecutor(AgentbridgeExecutor)" in agent and "spec.yaml" in agent
    manifest = json.loads((calculator_job / "manifest.json").read_text())
    assert manifest["backend"] == "openrlhf" and manifest["versions"]["openrlhf_pin"] == "0.11.2"
    spec = load_spec(CALC)
    assert manifest["tasks"] == {"train": spec.data.train.size, "eval": spec.data.eval.size}


def test_launch_flags_are_full_dotted_names_mapped_from_the_spec(calculator_job: Path) -> None:
    argv = job_argv(calculator_job, model="/m")
    flags = [a[2:] for a in argv if a.startswith("--")]
    known = openrlhf_flags()
    assert all(f in known for f in flags), [f for f in flags if f not in known]  # no abbreviations, no old names
    value = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if not argv[i + 1].startswith("--")}
    assert value["actor.model_name_or_path"] == "/m"
    assert value["train.agent_func_path"] == str(calculator_job / "agentbridge_agent.py")
    assert value["algo.advantage.estimator"] == "group_norm"  # the example is dapo: group_norm + ...
    assert value["data.max_len"] == "768"  # max_prompt_tokens 512 + max_response_tokens 256
    assert value["rollout.n_samples_per_prompt"] == "4" and value["rollout.batch_size"] == "8"
    lr = load_spec(CALC).algorithm.lr
    assert value["train.batch_size"] == "32" and float(value["actor.adam.lr"]) == lr
    assert {"train.colocate_all", "vllm.enable_sleep", "vllm.enable_prefix_caching",
            "data.apply_chat_template"} <= set(flags)
    submit = (calculator_job / "submit.sh").read_text()
    assert "ray job submit" in submit and "--working-dir \"$JOB\"" in submit
    remote = subprocess.run(["bash", str(calculator_job / "submit.sh"), "--print-args"], capture_output=True,
                            env={"MODEL": "/m", "PATH": "/usr/bin:/bin"}, check=True).stdout.decode().split("\0")
    assert [a.replace(str(calculator_job), ".").replace("runs/calculator", "out") for a in argv] == remote[:-1]


@pytest.mark.parametrize(("algo", "flags"), [
    ("grpo", {"algo.advantage.estimator": "group_norm", "actor.loss_agg_mode": "seq-mean-token-mean"}),
    ("dr_grpo", {"algo.advantage.estimator": "dr_grpo"}),
    ("rloo", {"algo.advantage.estimator": "rloo"}),
    ("reinforce_pp", {"algo.advantage.estimator": "reinforce"}),
    ("gspo", {"algo.advantage.estimator": "group_norm", "actor.policy_loss_type": "gspo",
              "actor.eps_clip_low_high": "0.0003"}),
    ("dapo", {"algo.advantage.estimator": "group_norm", "actor.eps_clip_low_high": "0.2"}),
    ("ppo", {"algo.advantage.estimator": "gae", "critic.model_name_or_path": "/m", "algo.advantage.lambd": "0.95"}),
])
def test_algorithm_mapping(algo: str, flags: dict[str, str], tmp_path: Path) -> None:
    spec = load_spec(CALC, [f"algorithm.name={algo}", "algorithm.kl_coef=0.01"])
    assert OpenRLHFBackend().check(spec) == []
    argv = job_argv(OpenRLHFBackend().compile(spec, tmp_path / "j").path, model="/m")
    for flag, value in flags.items():
        assert argv[argv.index(f"--{flag}") + 1] == value
    assert "--algo.kl.use_loss" in argv and argv[argv.index("--algo.kl.estimator") + 1] == "k3"


@pytest.mark.parametrize(("sets", "where", "text"), [
    (["algorithm.group_size=1"], "algorithm.group_size", "group_size >= 2"),
    ([OURS, "backend.overrides={agent_func_path: x.py}"], "backend.overrides.agent_func_path", "renamed in 0.10.2"),
    ([OURS, "backend.overrides={data.label_key: other}"], "backend.overrides.data.label_key", "set by the adapter"),
    ([OURS, "backend.options={bogus: 1}"], "backend.options.bogus", "unknown OpenRLHF option"),
    (["agent.sampling.top_k=5"], "agent.sampling.top_k", "no top_k flag"),
    (["model.path=builtin:tiny-vl", "algorithm.name=ppo"], "algorithm.name", "no critic for vision-language"),
])
def test_check_reports_one_line_per_problem(sets: list[str], where: str, text: str) -> None:
    problems = OpenRLHFBackend().check(load_spec(CALC, sets))
    assert len(problems) == 1, [str(p) for p in problems]
    assert problems[0].where == where and text in problems[0].message and "\n" not in str(problems[0])


def test_capabilities_run_every_algorithm() -> None:
    from agentbridge.spec import ALGORITHMS

    caps = OpenRLHFBackend().capabilities()
    assert caps.verified_in_ci and caps.serves_reward_models
    assert set(caps.algorithms) == set(ALGORITHMS) and caps.multimodal and caps.tool_images and caps.async_rollout


def test_another_backends_options_are_left_out_with_a_note(tmp_path: Path) -> None:
    """examples/*.yaml name TRL as their backend; its options (eval_size) mean nothing to OpenRLHF."""
    foreign = ["backend.options={eval_size: 4, is_correction: token}", "backend.overrides={no_such_flag: 1}"]
    spec = load_spec(CALC, foreign)
    assert spec.backend.name == "trl" and OpenRLHFBackend().check(spec) == []
    job = OpenRLHFBackend().compile(spec, tmp_path / "foreign")
    argv = job_argv(job.path, model="/m")
    assert "--no_such_flag" not in argv and "--algo.advantage.is_correction_level" not in argv
    note = "backend.options and backend.overrides are for backend trl (backend.name): not applied to the OpenRLHF job"
    assert job.manifest["notes"][0] == note and f"# NOTE: {note}" in (job.path / "launch.sh").read_text()
    ours = OpenRLHFBackend().compile(load_spec(CALC, [OURS, foreign[0]]), tmp_path / "ours")
    assert OpenRLHFBackend().check(load_spec(CALC, [OURS, foreign[0]]))[0].where == "backend.options.eval_size"
    argv = job_argv(ours.path, model="/m")
    assert argv[argv.index("--algo.advantage.is_correction_level") + 1] == "token"
    assert [n.split(" ", 1)[0] for n in ours.manifest["notes"]] == ["algorithm.warm_start.control"]  # an SFT control


def test_the_job_checkpoints_and_resumes_in_its_output_directory(tmp_path: Path) -> None:
    """A DeepSpeed checkpoint every 50 steps under OUT (two kept); launched again with the same OUT, OpenRLHF
    continues from the newest (its ckpt.load_enable), never from a directory relative to a node's working_dir."""
    job = OpenRLHFBackend().compile(load_spec(CALC), tmp_path / "job")
    argv = job_argv(job.path, model="/m")
    value = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert value["ckpt.save_steps"] == "50" and value["ckpt.max_num"] == "2" and "--ckpt.load_enable" in argv
    assert value["ckpt.path"] == f"{value['ckpt.output_dir'].removesuffix('/ckpt')}/checkpoints"
    off = OpenRLHFBackend().compile(load_spec(CALC, ["backend.name=openrlhf", "backend.options={save_steps: -1}"]),
                                    tmp_path / "off")
    off_argv = job_argv(off.path, model="/m")
    assert off_argv[off_argv.index("--ckpt.save_steps") + 1] == "-1"


def test_dynamic_filtering_says_how_many_steps_it_will_run(tmp_path: Path) -> None:
    """OpenRLHF's dynamic filtering (turned on through backend.overrides) draws a new prompt per dropped group and
    stops when the data runs out: the job says so, with the prompts it has, instead of promising algorithm.steps."""
    sets = [OURS, "backend.overrides={algo.dynamic_filtering_enable: true}", "algorithm.steps=10",
            "algorithm.batch_size=8", "data.train.size=64"]
    job = OpenRLHFBackend().compile(load_spec(CALC, sets), tmp_path / "filtered")
    argv = job_argv(job.path, model="/m")
    assert "--algo.dynamic_filtering_enable" in argv  # with the spec's reward range, as when dapo turns it on
    assert argv[argv.index("--algo.dynamic_filtering_range") + 1:][:2] == ["0.0", "1.1"]
    [note] = [n for n in job.manifest["notes"] if n.startswith("algo.dynamic_filtering_enable")]  # 40 x 2 passes
    assert "stops when its 80 prompts are used up" in note and "about 10 x (the share of groups kept) steps" in note
    assert f"# NOTE: {note}" in (job.path / "launch.sh").read_text()
    plain = OpenRLHFBackend().compile(load_spec(CALC, [OURS]), tmp_path / "plain")
    assert not [n for n in plain.manifest["notes"] if n.startswith("algo.dynamic_filtering_enable")]
