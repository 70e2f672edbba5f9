"""The adapter base: check, compile, validate, launch and conformance written once, from what an adapter declares.

An adapter subclasses :class:`Adapter`, declares what its backend is (name, module, pins, algorithms and why not,
options, capabilities, how it was verified, the recipe of its environment) and implements the parts only it knows:
its job's config table, its data rows, its extra files and its scripts' lines. The base runs the sequences:

- ``check``: algorithm, unknown options, ``backend.overrides`` of the keys the adapter writes from the spec, recipe
  and sizing fields it cannot honour, options that disagree with their sizing field, groups, images, then
  :meth:`Adapter.spec_problems`;
- ``compile``: a :class:`Draft` of tasks → :meth:`Adapter.write_data` → ``spec.yaml`` → :meth:`Adapter.job_config` → the
  ``modify_backend_config`` hook → :meth:`Adapter.write_config` → :meth:`Adapter.write_files` → notes →
  ``launch.sh`` / ``submit.sh`` → the manifest;
- ``validate``: the adapter's validator module, here or in the backend's environment;
- ``launch``: ``launch.sh`` with the backend's interpreter; ``conformance``: the adapter's ``golden_records``.
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel

from agentbridge.adapter import checks
from agentbridge.adapter.job import launch_job, new_job
from agentbridge.adapter.scripts import entry_script, write_script
from agentbridge.adapter.validation import run_validator
from agentbridge.backend_envs import EnvironmentRecipe
from agentbridge.backends import Capabilities, Job, Problem, Report, backend_python
from agentbridge.env import Task
from agentbridge.runs import write_jsonl
from agentbridge.spec import Spec, dump_spec
from agentbridge.spec.recipe import RECIPE_FIELDS, recipe_key
from agentbridge.spec.sizing import option_conflicts, sizing, sizing_refusals


@dataclass
class Draft:
    """A job being compiled: its spec, its directory, its tasks, what writing its data found out (``facts``) and its
    config table (``config``, from :meth:`Adapter.job_config`)."""

    spec: Spec
    out: Path
    train: list[Task]
    evals: list[Task]
    facts: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def has_eval(self) -> bool:
        """Whether the job has held-out tasks (``data.eval``)."""
        return bool(self.evals)


class Adapter:
    """A backend adapter as a declaration; see the module's docstring for the sequences it runs."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.options_model is not None and "known_options" not in cls.__dict__:
            cls.known_options = {name: f.get_default(call_default_factory=True)
                                 for name, f in cls.options_model.model_fields.items()}

    name: ClassVar[str]  # the backend's id (``backend.name`` in a spec)
    label: ClassVar[str]  # the backend's name in messages ("veRL")
    module: ClassVar[str]  # what must import for the backend to run here
    version: ClassVar[str]  # the adapter's version
    pin: ClassVar[str | None] = None  # the backend package's pinned version (None: not on the package index)
    algorithms: ClassVar[Mapping[str, Any]] = {}  # what it runs (keys)
    # the other Capabilities fields it sets (async_rollout, scale_out, notes, ...), for the default capabilities()
    capability_fields: ClassVar[Mapping[str, Any]] = {}
    # how ``agentbridge backends setup`` builds its environment (None: it declares none, the command refuses)
    environment: ClassVar[EnvironmentRecipe | None] = None
    why_not: ClassVar[Mapping[str, str]] = {}  # algorithm it does not run -> why
    grouped: ClassVar[frozenset[str]] = frozenset()  # algorithms that need groups of two or more
    known_options: ClassVar[Mapping[str, Any]] = {}  # ``backend.options`` it knows, with defaults
    options_model: ClassVar[type[BaseModel] | None] = None  # their types and ranges (each field's description: "must be
    # ..."), checked strictly by ``check``; set it and ``known_options`` comes from its defaults
    owned_overrides: ClassVar[Mapping[str, str]] = {}  # backend key written from the spec -> the spec field
    recipe_why_not: ClassVar[Mapping[str, Mapping[Any, str]]] = {}  # field -> recipe_key ("*": any) -> why not
    lora_why_not: ClassVar[str | None] = "its adapter maps no LoRA"  # why it cannot train ``model.lora`` (None: can)
    epochs_why_not: ClassVar[str | None] = None  # why it cannot run ``algorithm.epochs`` above 1 (None: it can)
    sizing_options: ClassVar[Mapping[str, str]] = {}  # resources sizing field -> its ``backend.options`` twin
    sizing_why_not: ClassVar[Mapping[str, str]] = {}  # resources sizing field it has no setting for -> why
    validator: ClassVar[str | None] = None  # module with ``validate_job``
    conformance_module: ClassVar[str | None] = None  # module with ``golden_records``
    rollout_not_held: ClassVar[Mapping[str, str]] = {}  # rollout fields its records do not hold -> why
    config_file: ClassVar[str] = ""  # the config table's file name in the job
    config_header: ClassVar[str] = ""  # its first comment line(s)
    notes_in_submit: ClassVar[bool] = False  # whether submit.sh repeats launch.sh's notes
    # whether compile notes that the job does not run algorithm.warm_start.control (the SFT-only control needs RL's
    # wall time in-process): for a backend whose trainer runs as a program of its own, with the phases around it
    control_note: ClassVar[bool] = False
    gpu_trainer: ClassVar[bool] = False  # whether its trainer needs GPUs (a CPU spec compiles for 1 GPU per node)
    # the job's own entry file, written by the default write_files: (file name, its docstring, the module whose
    # ``main`` it calls)
    entry: ClassVar[tuple[str, str, str] | None] = None

    # ------------------------------------------------------------------ what a subclass declares or implements

    def capabilities(self) -> Capabilities:
        """What the backend runs with agentbridge's driver inside it: its :attr:`algorithms` and the
        :attr:`capability_fields` it declares."""
        return Capabilities(algorithms=sorted(self.algorithms), **copy.deepcopy(dict(self.capability_fields)))

    def spec_problems(self, spec: Spec) -> list[Problem]:
        """The backend's own checks of a spec, beyond the base's (none by default)."""
        return []

    def recipe_refusals(self, spec: Spec) -> dict[str, str]:
        """The recipe fields of ``spec`` this backend cannot honour: the field's path -> why."""
        refusals = {}
        for name, values in self.recipe_why_not.items():
            value = getattr(spec.algorithm, name, None)
            if value is None:
                continue
            key = recipe_key(name, value)
            why = values.get(key, values.get("*"))
            if why is not None:
                refusals[f"algorithm.{name}"] = why
        if spec.model.lora is not None and self.lora_why_not:
            refusals["model.lora"] = self.lora_why_not
        if (spec.algorithm.epochs or 1) > 1 and self.epochs_why_not:
            refusals["algorithm.epochs"] = self.epochs_why_not
        refusals.update(sizing_refusals(spec, self.sizing_why_not))
        return {**refusals, **self.config_refusals(spec)}

    def config_refusals(self, spec: Spec) -> dict[str, str]:
        """The recipe settings the backend's config cannot honour for ``spec`` beyond the declared ones (they depend
        on the spec: the algorithm, the KL's placement, the job's GPUs), the field's path -> why; none by default."""
        return {}

    def task_row(self, task: Task, spec: Spec) -> dict[str, Any]:
        """One row of the backend's dataset for ``task`` (the default :meth:`write_data` writes them)."""
        raise NotImplementedError

    def write_data(self, draft: Draft) -> None:
        """Write the job's task data under ``draft.out`` (``draft.train``, ``draft.evals``); what the config needs to
        know of it goes to ``draft.facts``. By default ``data/train.jsonl`` and ``data/eval.jsonl`` (when there are
        held-out tasks) of :meth:`task_row`."""
        for split, tasks in (("train", draft.train), ("eval", draft.evals)):
            if tasks:
                write_jsonl(draft.out / "data" / f"{split}.jsonl", (self.task_row(t, draft.spec) for t in tasks))

    def job_config(self, draft: Draft) -> dict[str, Any]:
        """The backend's config table for the job, in its own names."""
        raise NotImplementedError

    def write_config(self, draft: Draft) -> None:
        """Write the config table (after the ``modify_backend_config`` hook): YAML under :attr:`config_file`."""
        (draft.out / self.config_file).write_text(self.config_header + yaml.safe_dump(draft.config, sort_keys=False))

    def write_files(self, draft: Draft) -> None:
        """Write the job's other files (an entry, an agent file); by default the declared :attr:`entry`, if any."""
        if self.entry is not None:
            name, doc, module = self.entry
            (draft.out / name).write_text(entry_script(doc, module))

    def compile_notes(self, draft: Draft) -> list[str]:
        """What the job does differently from the spec (kept in the manifest and at the top of ``launch.sh``)."""
        return []

    def launch_lines(self, draft: Draft) -> list[str]:
        """``launch.sh``'s lines after its head: run the job on this machine."""
        raise NotImplementedError

    def submit_lines(self, draft: Draft) -> list[str]:
        """``submit.sh``'s lines after its head: submit the job to a cluster (none: no ``submit.sh``)."""
        return []

    def gpus_per_node(self, spec: Spec) -> int | None:
        """The GPUs per node the job asks for, recorded in the manifest with the node count (None: not recorded)."""
        return None

    def manifest_extra(self, draft: Draft) -> dict[str, Any]:
        """What the manifest records beside the base's fields (upstream source, the command)."""
        return {}

    def python(self) -> str:
        """The interpreter of the backend's environment (``agentbridge.backends.backend_python``), else this one:
        the default ``PYTHON`` of its scripts."""
        return backend_python(self.name, self.module) or sys.executable

    # ------------------------------------------------------------------ the sequences, written once

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` the backend cannot run, one line each (needs no backend installed)."""
        return [*checks.algorithm_check(self, spec, self.why_not or None),
                *checks.unknown_options(self, spec, self.known_options, self.label),
                *(checks.option_problems(self, spec, self.options_model) if self.options_model else []),
                *checks.owned_override_problems(self, spec, self.owned_overrides),
                *checks.recipe_problems(self, spec),
                *[Problem(where, why) for where, why in option_conflicts(spec, self.name, self.sizing_options).items()],
                *checks.group_problem(spec, self.grouped),
                *checks.multimodal_problem(self, spec),
                *self.spec_problems(spec)]

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files under ``out``; the Job's manifest is filled (``compile_job`` writes it)."""
        from agentbridge.plugins import get_plugins
        from agentbridge.rollout.agent import load_tasks

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        draft = Draft(spec, out, load_tasks(spec, "train"), load_tasks(spec, "eval"))
        self.write_data(draft)
        (out / "spec.yaml").write_text(dump_spec(spec))
        draft.config = self.job_config(draft)
        get_plugins().hook.modify_backend_config(spec=spec, backend=self.name, config=draft.config)
        self.write_config(draft)
        self.write_files(draft)
        ws = spec.algorithm.warm_start
        control = (f"algorithm.warm_start.control is not run by the {self.label} job: the SFT-only control needs RL's "
                   "wall time in-process (the TRL backend runs it); the warm start and the held-out arms run around "
                   f"{self.label}'s trainer") if self.control_note and ws is not None and ws.control else None
        gpus = (f"resources.gpus_per_node is 0, but {self.label}'s trainer needs GPUs: compiled for 1 GPU per node"
                if self.gpu_trainer and spec.resources.gpus_per_node == 0 else None)
        notes = [n for n in (checks.foreign_note(self, spec, self.label), *self.compile_notes(draft), control, gpus)
                 if n]
        write_script(out / "launch.sh", self.launch_lines(draft), notes)
        submit = self.submit_lines(draft)
        if submit:
            write_script(out / "submit.sh", submit, notes if self.notes_in_submit else ())
        algorithm = spec.algorithm.model_dump()  # recipe fields left null are not in it
        sized = sizing(spec)  # recorded only when set: a job without them keeps the manifest it had
        per_node = self.gpus_per_node(spec)
        placed = {} if per_node is None else {"gpus": {"num_nodes": spec.resources.nodes, "gpus_per_node": per_node}}
        return new_job(self, spec, out, version=self.version, pin=self.pin,
                       tasks={"train": len(draft.train), "eval": len(draft.evals)}, notes=notes,
                       recipe={key: algorithm[key] for key in RECIPE_FIELDS if key in algorithm},
                       **({"sizing": sized} if sized else {}), **placed, **self.manifest_extra(draft))

    def validate(self, job: Job) -> Report:
        """The backend's own checks on the job, here or in the backend's environment; one line per problem."""
        if self.validator is None:
            return Report(ok=True)
        return run_validator(job, self, self.validator)

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` with the backend's interpreter; returns the run directory."""
        return launch_job(job, runner, run_dir, self, label=self.label, extra_args=extra_args or ())

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through the backend's own rollout path, read back from its training
        batch."""
        if self.conformance_module is None:
            raise NotImplementedError(f"{self.name} declares no conformance module")
        return list(importlib.import_module(self.conformance_module).golden_records(kind, workdir))
