"""What every backend adapter does the same way, written once: the face adapters import (``from agentbridge import
adapter as kit``).

- :class:`Adapter` (``base``): check, compile, validate, launch and conformance from an adapter's declarations;
- ``scripts``: :func:`write_script`, :func:`shell_quote`, :func:`default_line`, :func:`model_line`,
  :func:`ray_submit_lines`: every value from a spec quoted;
- ``checks``: algorithm, options, owned overrides, recipe, groups, images; :func:`foreign_note`;
- ``validation``: a validator's sequence (:func:`job_validator`, :func:`validate_with`), its start
  (:func:`begin_validation`, :func:`agent_check`), its backend's chatter muted (:func:`muted`), a Hydra config composed
  (:func:`compose_hydra`, :func:`composed`; its keys the backend does not have: :func:`unknown_config_keys`) and the
  JSON protocol between environments (:func:`run_validator`, :func:`validate_in`, :func:`validator_main`);
- ``job``: :func:`new_job`, :func:`job_spec`, :func:`launch_job`, :func:`set_dotted`, :func:`flatten`;
- ``options``: :class:`BackendOptions`, what of ``spec.backend`` one backend reads (its options and overrides);
- ``tasks``: the task codec (:data:`TASK_KEY`, :func:`encode_task`, :func:`decode_task`);
- ``cluster``: :func:`ray_cluster_nodes`;
- the core's names an adapter needs beside them (imported where they are defined on first use, so that importing
  the kit stays light): the backend protocol's :class:`Capabilities`, the environment recipe an adapter declares
  (:class:`EnvironmentRecipe`), :class:`Job`, :class:`JobError`,
  :class:`Problem`, :class:`Report`, :func:`backend_python`; the run files' :func:`write_jsonl`, :func:`read_jsonl`,
  :func:`append_jsonl`; the plugin registry, :func:`get_plugins`.

The rest of what an adapter imports from the core, by what it is for (each name imported on first use):

- :mod:`agentbridge.adapter.rollout`: the driver, as a backend's rollout runs it (with ``episode``: the episode loop);
- :mod:`agentbridge.adapter.models`: models, tokenizers and the reward models a backend serves;
- :mod:`agentbridge.adapter.training`: a training run's phases, metrics, trackers, console, report and run directory;
- :mod:`agentbridge.adapter.conformance`: the conformance kit (golden episodes, records, probes).
- :mod:`agentbridge.adapter.inline_cli`: a backend's command line whose parser its program builds under ``__main__``,
  run from the installed source.

Beside these and :mod:`agentbridge.spec`, an adapter imports only the public face, ``agentbridge`` (``hookimpl``,
``Task``, ...): the import contract "Adapters import the core through its faces" (pyproject.toml) holds that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy
from agentbridge.adapter.base import Adapter, Draft
from agentbridge.adapter.checks import (
    algorithm_check,
    foreign_note,
    group_problem,
    multimodal_problem,
    option_problems,
    owned_override_problems,
    recipe_problems,
    unknown_options,
)
from agentbridge.adapter.cluster import ray_cluster_nodes
from agentbridge.adapter.job import flatten, job_spec, launch_job, new_job, set_dotted
from agentbridge.adapter.options import BackendOptions
from agentbridge.adapter.scripts import (
    SCRIPT_HEAD,
    default_line,
    model_line,
    ray_submit_lines,
    run_dir_lines,
    shell_quote,
    write_script,
)
from agentbridge.adapter.tasks import TASK_KEY, decode_task, encode_task
from agentbridge.adapter.validation import (
    JobCheck,
    agent_check,
    begin_validation,
    compose_hydra,
    composed,
    first_line,
    job_validator,
    local_model_path,
    muted,
    muted_check,
    run_validator,
    unknown_config_keys,
    validate_in,
    validate_with,
    validator_main,
)

if TYPE_CHECKING:
    from agentbridge.backend_envs import EnvironmentRecipe
    from agentbridge.backends import Capabilities, Job, JobError, Problem, Report, backend_python
    from agentbridge.plugins import get_plugins
    from agentbridge.runs import append_jsonl, read_jsonl, write_jsonl

# the core's names re-exported here: name -> the core module that defines it (imported on first use)
_CORE = {
    "Capabilities": "agentbridge.backends",
    "EnvironmentRecipe": "agentbridge.backend_envs",
    "Job": "agentbridge.backends",
    "JobError": "agentbridge.backends",
    "Problem": "agentbridge.backends",
    "Report": "agentbridge.backends",
    "backend_python": "agentbridge.backends",
    "get_plugins": "agentbridge.plugins",
    "append_jsonl": "agentbridge.runs",
    "read_jsonl": "agentbridge.runs",
    "write_jsonl": "agentbridge.runs",
}

__all__ = [
    "Capabilities", "EnvironmentRecipe", "Job", "JobError", "Problem", "Report", "append_jsonl", "backend_python",
    "get_plugins", "read_jsonl", "write_jsonl",
    "Adapter", "BackendOptions", "Draft", "JobCheck", "SCRIPT_HEAD", "TASK_KEY", "agent_check", "algorithm_check",
    "begin_validation", "compose_hydra", "composed", "decode_task", "default_line", "encode_task", "first_line",
    "flatten", "foreign_note", "group_problem", "job_spec", "job_validator", "launch_job", "local_model_path",
    "model_line", "multimodal_problem", "muted", "muted_check", "new_job", "option_problems", "owned_override_problems",
    "ray_cluster_nodes", "ray_submit_lines", "recipe_problems", "run_dir_lines", "run_validator", "set_dotted",
    "shell_quote", "unknown_config_keys", "unknown_options", "validate_in", "validate_with", "validator_main",
    "write_script",
]


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)
