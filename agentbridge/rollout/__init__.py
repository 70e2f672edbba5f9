"""The token-level rollout driver: renderer, tool-call parsers, policies, trajectories, episodes."""

from agentbridge.rollout.driver import run_episode, run_episodes
from agentbridge.rollout.parsers import HermesParser, ParsedAction
from agentbridge.rollout.policy import Policy, ScriptedPolicy
from agentbridge.rollout.renderer import Renderer, TemplateError
from agentbridge.trajectory import Generation, Limits, SamplingParams, Trajectory, Turn

__all__ = ["Generation", "HermesParser", "Limits", "ParsedAction", "Policy", "Renderer", "SamplingParams",
           "ScriptedPolicy", "TemplateError", "Trajectory", "Turn", "run_episode", "run_episodes"]
