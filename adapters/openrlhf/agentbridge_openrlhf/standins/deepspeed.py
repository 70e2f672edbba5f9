"""Stand-in for DeepSpeed (conformance and tests, on CPU), so OpenRLHF's experience maker imports without a GPU.

``openrlhf.trainer.ppo_utils.experience_maker`` imports ``RayActorGroup`` from ``openrlhf.trainer.ray.launcher``,
which imports the DeepSpeed actor/critic models (DeepSpeed, flash-attn, peft). The advantage computation uses
none of them: the launcher is replaced by an empty ``RayActorGroup``, ``deepspeed`` by an empty module, and
``openrlhf.models`` is opened as a plain namespace (its ``utils``/``loss`` modules are OpenRLHF's own code).
"""

from __future__ import annotations

import os
import sys
import types


def empty_deepspeed() -> types.ModuleType:
    """An empty ``deepspeed`` module with a module spec (``importlib.util.find_spec`` callers, such as
    transformers' ``is_deepspeed_available`` when peft imports it, raise on a module without one)."""
    import importlib.machinery

    module = types.ModuleType("deepspeed")
    module.__spec__ = importlib.machinery.ModuleSpec("deepspeed", None)
    return module


def install() -> None:
    """Put the stand-ins in ``sys.modules`` (idempotent). Call before importing the experience maker."""
    if "openrlhf.trainer.ray.launcher" in sys.modules:
        return
    import openrlhf

    if "deepspeed" not in sys.modules:
        sys.modules["deepspeed"] = empty_deepspeed()
    launcher = types.ModuleType("openrlhf.trainer.ray.launcher")

    class RayActorGroup:  # the DeepSpeed actor/ref/critic group; never constructed on the rollout path
        pass

    launcher.RayActorGroup = RayActorGroup  # type: ignore[attr-defined]
    sys.modules["openrlhf.trainer.ray.launcher"] = launcher
    if "openrlhf.models" not in sys.modules:
        models = types.ModuleType("openrlhf.models")
        models.__path__ = [os.path.join(os.path.dirname(openrlhf.__file__), "models")]
        sys.modules["openrlhf.models"] = models
