"""What every backend adapter does the same way, written once: the face adapters import (``from agentbridge import
adapter as kit``).

- :class:`Adapter` (``base``): check, compile, validate, launch and conformance from an adapter's declarations;
- ``scripts``: :func:`write_script`, :func:`shell_quote`, :func:`default_line`, :func:`model_line`,
  :func:`ray_submit_lines`: every value from a spec quoted;
- ``checks``: algorithm, options, owned overrides, recipe, groups, images; :func:`foreign_note`;
- ``validation``: a validator's start (:func:`begin_validation`, :func:`agent_check`) and the JSON protocol between
  environments (:func:`run_validator`, :func:`validate_in`, :func:`validator_main`);
- ``job``: :func:`new_job`, :func:`job_spec`, :func:`launch_job`, :func:`set_dotted`, :func:`flatten`;
- ``tasks``: the task codec (:data:`TASK_KEY`, :func:`encode_task`, :func:`decode_task`);
- ``cluster``: :func:`ray_cluster_nodes`.
"""

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
    first_line,
    run_validator,
    validate_in,
    validator_main,
)

__all__ = [
    "Adapter", "Draft", "JobCheck", "SCRIPT_HEAD", "TASK_KEY", "agent_check", "algorithm_check", "begin_validation",
    "decode_task", "default_line", "encode_task", "first_line", "flatten", "foreign_note", "group_problem",
    "job_spec", "launch_job", "model_line", "multimodal_problem", "new_job", "option_problems",
    "owned_override_problems", "ray_cluster_nodes", "ray_submit_lines", "recipe_problems", "run_dir_lines",
    "run_validator", "set_dotted", "shell_quote", "unknown_options", "validate_in", "validator_main", "write_script",
]
