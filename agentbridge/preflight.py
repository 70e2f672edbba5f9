"""What ``agentbridge validate`` checks beyond the spec's own fields: values that parse but would poison a run.

Each check returns one line per problem (empty when fine): the backend must be installed, the model path must
exist (a builtin, a local model directory with its config.json, or a hub id), the eval and dev tasks must not be
training tasks (nor each other's), the opening prompt — system prompt, tool schemas and a sample task — must fit
``agent.max_prompt_tokens``, and (for ``check``) the backend's own environment must have every plugin the spec
names. Each line starts with the field it is about (``agentbridge.spec.locate`` adds the file and line).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbridge.models import BUILTIN_MODELS, is_hub_id
from agentbridge.plugins import Plugins
from agentbridge.spec.schema import Spec

if TYPE_CHECKING:
    from agentbridge.env import Task


def backend_problems(spec: Spec, plugins: Plugins) -> list[str]:
    """``backend.name`` must be an installed backend (with did-you-mean)."""
    name = spec.backend.name
    if name in plugins.backends:
        return []
    installed = ", ".join(plugins.backends.ids()) or "none"
    return [f"backend.name: {plugins.backends.unknown(name)} (installed: {installed}; a backend is a package: "
            f"pip install its adapter)"]


def model_path_problems(spec: Spec) -> list[str]:
    """``model.path`` must be a builtin model, an existing local directory, or a hub id (``org/name``)."""
    path = spec.model.path
    if path.startswith("builtin:"):
        if path in BUILTIN_MODELS:
            return []
        return [f"model.path: unknown builtin model '{path}' (builtins: {', '.join(BUILTIN_MODELS)})"]
    local = Path(path).expanduser()
    if local.exists():
        if not local.is_dir():
            return [f"model.path: '{path}' is a file; give the model's directory"]
        if not (local / "config.json").is_file():
            return [f"model.path: '{path}' is a directory without config.json, not a model directory (give the "
                    f"directory that holds the model's config.json and weights)"]
        return []
    if is_hub_id(path):
        return []  # a hub id: the backend's environment downloads it (or finds it in its cache)
    return [f"model.path: '{path}' does not exist (give a local model directory, a hub id like Qwen/Qwen2.5-0.5B "
            f"or a builtin: {', '.join(BUILTIN_MODELS)})"]


def task_identity(task: Task) -> str:
    """What makes two tasks the same problem, hashed: the prompt and the answer (``data["answer"]``) when the task
    has one, else the prompt and all of ``data`` (a page or reset seed, a game); images too. Not the task id, which
    names the split it was drawn for."""
    what: dict[str, Any] = {"prompt": task.prompt}
    if "answer" in task.data:
        what["answer"] = task.data["answer"]
        if "images" in task.data:
            what["images"] = task.data["images"]
    else:
        what["data"] = task.data
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=repr).encode())
    for image in task.images:
        digest.update(image.tobytes() if hasattr(image, "tobytes") else repr(image).encode())
    return digest.hexdigest()


# (split, the split it must not share a task with): what a shared task would spoil
_HELD_OUT = {("eval", "train"): "held-out scores would be measured on training tasks",
             ("dev", "train"): "the warm start would decide when to stop on tasks it trains on",
             ("eval", "dev"): "held-out scores would be measured on the tasks the warm start stops on"}


def split_overlap_problems(spec: Spec, plugins: Plugins, budget_s: float | None = 30.0,
                           notes: list[str] | None = None) -> list[str]:
    """``data.eval`` and ``data.dev`` must hold no training task, and eval no dev task: their tasks are built as a
    run builds them (each split at its size) and compared by :func:`task_identity`, whatever the split names say.

    A split that cannot be built is left to the checks that report that (ids, files, dataset sizes). The builds get
    ``budget_s`` seconds (None: no limit), on a daemon thread that is left to finish (a first build of a large
    generated world can take minutes); the pairs not compared by then are skipped, each with a line in ``notes``
    when it is given.
    """
    from agentbridge.rollout.agent import load_tasks

    pairs = [(split, other, spoiled) for (split, other), spoiled in _HELD_OUT.items()
             if getattr(spec.data, split) is not None and getattr(spec.data, other) is not None]
    needed = [s for s in ("train", "dev", "eval") if any(s in pair[:2] for pair in pairs)]
    built: dict[str, list[str] | None] = {}

    def build() -> None:
        for split in needed:
            try:
                built[split] = [task_identity(t) for t in load_tasks(spec, split, plugins=plugins)]
            except Exception:  # noqa: BLE001 - reported by the check of that split, not as an overlap
                built[split] = None

    if budget_s is None:
        build()
    elif needed:
        worker = threading.Thread(target=build, name="split-overlap", daemon=True)
        worker.start()
        worker.join(budget_s)
    done = dict(built)
    problems = []
    for split, other, spoiled in pairs:
        if split not in done or other not in done:
            if notes is not None:
                notes.append(f"data.{split}: not compared with data.{other} for shared tasks: building their tasks "
                             f"took more than {budget_s:g} s")
            continue
        mine, theirs = done[split], done[other]
        if not mine or not theirs:
            continue
        seen = set(theirs)
        shared = sum(identity in seen for identity in mine)
        if shared:
            problems.append(f"data.{split}: {shared} of {len(mine)} {split} tasks are also {other} tasks (the "
                            f"same prompt and answer, or prompt and task data); {spoiled}")
    return problems


def _template_and_tokenizer(spec: Spec) -> tuple[str, Any, dict[str, str]] | None:
    """The chat template, a ``tokenizers.Tokenizer`` and the special tokens of a builtin or local model, read from
    its files without transformers' model classes (so without torch); None when they are not there."""
    from agentbridge.models import resolve_model_path

    path = spec.model.path
    if not (path in BUILTIN_MODELS or Path(path).expanduser().is_dir()):
        return None
    try:
        model_dir = resolve_model_path(path)
    except ValueError:
        return None
    if not (model_dir / "tokenizer.json").is_file():  # e.g. a tiktoken vocabulary: not cheap to read here
        return None
    config = json.loads((model_dir / "tokenizer_config.json").read_text()) \
        if (model_dir / "tokenizer_config.json").is_file() else {}
    if spec.model.chat_template:
        from agentbridge.rollout.agent import load_chat_template

        template = load_chat_template(spec.model.chat_template)
    elif (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text()
    elif isinstance(config.get("chat_template"), str):
        template = config["chat_template"]
    else:
        return None
    from tokenizers import Tokenizer

    special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
    return template, Tokenizer.from_file(str(model_dir / "tokenizer.json")), special


def prompt_budget_problems(spec: Spec, plugins: Plugins) -> list[str]:
    """The opening prompt (system prompt, the tools' schemas, the first task of a data split) must leave room in
    ``agent.max_prompt_tokens``. Checked only where it is cheap: a builtin or local model with a ``tokenizer.json``,
    rendered by transformers' chat-template renderer (no torch)."""
    found = _template_and_tokenizer(spec)
    if found is None:
        return []
    template, tokenizer, special = found
    from transformers.utils.chat_template_utils import render_jinja_template

    from agentbridge.rollout.agent import load_tasks
    from agentbridge.rollout.agent_edge import prompt_messages

    split = next((s for s in ("dev", "eval", "train") if getattr(spec.data, s) is not None), None)
    tasks = load_tasks(spec, split, size=1, plugins=plugins) if split else []
    tools: list[dict[str, Any]] = [plugins.tools.get(t).schema() for t in spec.tools]
    user = tasks[0].prompt if tasks else None
    rendered, _ = render_jinja_template([prompt_messages(spec.agent.system_prompt, user)], tools=tools or None,
                                        chat_template=template, add_generation_prompt=True, **special)
    n = len(tokenizer.encode(rendered[0], add_special_tokens=False).ids)
    limit = spec.agent.max_prompt_tokens
    if n <= limit:
        return []
    what = "the system prompt, the tools and the first task's prompt" if user else "the system prompt and the tools"
    return [f"agent.max_prompt_tokens: {what} take {n} tokens, more than {limit}; every episode would end "
            f"on length before a turn"]


_IDS_PROBE = """
import sys
from agentbridge.rollout.agent import check_ids
from agentbridge.spec import load_spec
print("\\n".join(check_ids(load_spec(sys.argv[1]))))
"""


def backend_env_problems(spec_path: Path, backend: str, module: str) -> list[str]:
    """Every id of the spec at ``spec_path`` that the backend's own environment cannot resolve (a plugin installed
    here but not there); empty when the backend runs in this interpreter or has no environment yet."""
    import subprocess
    import sys

    from agentbridge.backends import backend_python

    python = backend_python(backend, module)
    if python is None or Path(python).absolute() == Path(sys.executable).absolute():
        return []
    try:
        result = subprocess.run([python, "-c", _IDS_PROBE, str(spec_path)], capture_output=True, text=True,
                                timeout=300)
    except subprocess.TimeoutExpired:
        return [f"{backend}'s environment ({python}) did not answer within 300 s"]
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"{backend}'s environment ({python}) cannot read the spec: {last}"]
    return [f"{line} in {backend}'s environment ({python}); `agentbridge backends setup {backend}` installs every "
            f"plugin installed here" for line in result.stdout.splitlines() if line]


def scale_warnings(spec: Spec) -> list[str]:
    """Settings sized for a builtin CPU model that a real model would not train well with (warnings, not errors):
    the recipes of veRL, OpenRLHF and TRL use learning rates around 1e-6 and turns of hundreds of tokens."""
    if spec.model.path.startswith("builtin:"):
        return []
    out = []
    if spec.algorithm.lr > 1e-5:
        out.append(f"algorithm.lr {spec.algorithm.lr:g} is sized for a builtin CPU model; the backends' recipes "
                   f"train real models at about 1e-6")
    ws = spec.algorithm.warm_start
    if ws is not None and ws.lr > 1e-4:
        out.append(f"algorithm.warm_start.lr {ws.lr:g} is sized for a builtin CPU model; SFT of a real model "
                   f"uses about 1e-5")
    if spec.agent.max_tokens_per_turn < 128:
        out.append(f"agent.max_tokens_per_turn {spec.agent.max_tokens_per_turn} is sized for a builtin CPU model; "
                   f"a real model's turns (reasoning, tool calls) need hundreds of tokens")
    return out
