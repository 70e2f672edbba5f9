"""Helpers for tests: the environment checker for plugin authors (:mod:`agentbridge.testing.environments`) and the
harness for backend test suites and end-to-end runs (:mod:`agentbridge.testing.harness`)."""

from agentbridge.testing.environments import (
    EnvironmentCheckError,
    check_environment,
    check_seed_block_dataset,
    environment_problems,
    environment_problems_async,
    message_problem,
    step_result_problems,
    tool_schema_problems,
)
from agentbridge.testing.harness import (
    ExitAfterReport,
    TimedRay,
    assert_only_the_adapter_trained,
    assert_reference_is_the_base,
    assert_refusal_names_who_can,
    logical_gpu_cluster,
    merge_as_ray_init,
    ray_driver_env,
    ray_job_submitted,
    short_training_run,
)

__all__ = [
    "EnvironmentCheckError",
    "ExitAfterReport",
    "TimedRay",
    "assert_only_the_adapter_trained",
    "assert_reference_is_the_base",
    "assert_refusal_names_who_can",
    "check_environment",
    "check_seed_block_dataset",
    "environment_problems",
    "environment_problems_async",
    "logical_gpu_cluster",
    "merge_as_ray_init",
    "message_problem",
    "ray_driver_env",
    "ray_job_submitted",
    "short_training_run",
    "step_result_problems",
    "tool_schema_problems",
]
