"""An OpenEnv environment server (runs in the server venv, ``.venv-openenv``, never in the training environment).

``guess``: find a secret number in ``[low, high]`` (drawn from the reset seed) within a number of guesses; each
observation says ``higher``, ``lower`` or ``correct`` and the range still possible. The correct guess scores 1.0
and ends the episode; running out of guesses ends it with 0. Two faces of the same game, served by OpenEnv's own
``create_app`` (HTTP, ``/schema`` and the ``/ws`` session protocol):

- ``--kind action``: an action schema (``GuessAction{guess: int}``), stepped with ``{"type": "step", "data": {...}}``;
- ``--kind mcp``: an ``MCPEnvironment`` whose FastMCP tools (``guess``, ``give_up``) are listed and called with
  ``list_tools`` / ``call_tool`` actions.

Run: ``.venv-openenv/bin/python plugins/openenv/servers/guess_server.py --kind action --port 8000``.
"""

from __future__ import annotations

import argparse
import random
from typing import Any
from uuid import uuid4

import uvicorn
from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field


class GuessAction(Action):
    """One guess."""

    guess: int = Field(..., description="The number to guess")


class GuessObservation(Observation):
    """What the last guess told."""

    message: str = Field(default="", description="The game's reply")
    feedback: str = Field(default="start", description="start, higher, lower, correct or out_of_guesses")
    low: int = Field(default=1, description="Smallest number still possible")
    high: int = Field(default=100, description="Largest number still possible")
    guesses_left: int = Field(default=0, description="Guesses left")


class GuessState(State):
    """The game's state."""

    secret: int = 0
    low: int = 1
    high: int = 100
    guesses_left: int = 0
    finished: bool = False


class Game:
    """The game's rules, shared by both faces."""

    def __init__(self) -> None:
        self.state = GuessState(episode_id=str(uuid4()))

    def reset(self, seed: int | None, episode_id: str | None, low: int, high: int, max_guesses: int) -> str:
        rng = random.Random(seed)
        self.state = GuessState(episode_id=episode_id or str(uuid4()), secret=rng.randint(low, high), low=low,
                                high=high, guesses_left=max_guesses)
        return f"I picked a number from {low} to {high}. You have {max_guesses} guesses."

    def guess(self, number: int) -> tuple[str, str, float, bool]:
        """(feedback, message, reward, done) for one guess."""
        s = self.state
        if s.finished:
            raise ValueError("the game is over; reset to play again")
        s.step_count += 1
        s.guesses_left -= 1
        if number == s.secret:
            s.finished = True
            return "correct", f"{number} is correct!", 1.0, True
        if number < s.secret:
            s.low = max(s.low, number + 1)
            feedback = "higher"
        else:
            s.high = min(s.high, number - 1)
            feedback = "lower"
        if s.guesses_left <= 0:
            s.finished = True
            return "out_of_guesses", f"{number} is wrong and no guesses are left.", 0.0, True
        return feedback, f"{number} is wrong: go {feedback}.", 0.0, False


class GuessEnvironment(Environment):
    """The game behind an action schema."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.game = Game()

    def _observation(self, feedback: str, message: str, reward: float = 0.0, done: bool = False) -> GuessObservation:
        s = self.game.state
        return GuessObservation(message=message, feedback=feedback, low=s.low, high=s.high,
                                guesses_left=s.guesses_left, reward=reward, done=done)

    def reset(self, seed: int | None = None, episode_id: str | None = None, low: int = 1, high: int = 100,
              max_guesses: int = 8, **kwargs: Any) -> GuessObservation:
        return self._observation("start", self.game.reset(seed, episode_id, low, high, max_guesses))

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:  # type: ignore[override]
        feedback, message, reward, done = self.game.guess(action.guess)
        return self._observation(feedback, message, reward, done)

    @property
    def state(self) -> GuessState:
        return self.game.state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="guess", description="Guess the secret number (action schema).",
                                   version="1.0.0")


class GuessMCPEnvironment(MCPEnvironment):
    """The game behind MCP tools; a tool call that ends the game carries its reward and ``done``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self.game = Game()
        self._outcome: tuple[float, bool] = (0.0, False)
        mcp = FastMCP("guess")

        @mcp.tool
        def guess(number: int) -> str:
            """Guess the secret number; the reply says go higher, go lower or correct, and the range left.

            Args:
                number: the number to guess
            """
            feedback, message, reward, done = self.game.guess(number)
            self._outcome = (reward, done)
            s = self.game.state
            return f"{message} Still possible: {s.low} to {s.high}; {s.guesses_left} guesses left."

        @mcp.tool
        def give_up() -> str:
            """Stop playing; the episode ends with no reward."""
            self.game.state.finished = True
            self._outcome = (0.0, True)
            return f"The number was {self.game.state.secret}."

        super().__init__(mcp)

    def reset(self, seed: int | None = None, episode_id: str | None = None, low: int = 1, high: int = 100,
              max_guesses: int = 8, **kwargs: Any) -> Observation:
        self._outcome = (0.0, False)
        message = self.game.reset(seed, episode_id, low, high, max_guesses)
        return Observation(metadata={"message": message, "low": low, "high": high, "guesses_left": max_guesses})

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        self._outcome = (0.0, False)
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and isinstance(obs, CallToolObservation):
            obs.reward, obs.done = self._outcome
        return obs

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError(f"unsupported action {type(action).__name__}; use list_tools or call_tool")

    @property
    def state(self) -> GuessState:
        return self.game.state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="guess_mcp", description="Guess the secret number (MCP tools).",
                                   version="1.0.0")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kind", choices=["action", "mcp"], default="action")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args()
    if args.kind == "action":
        app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess",
                         max_concurrent_envs=args.max_sessions, state_cls=GuessState)
    else:
        app = create_app(GuessMCPEnvironment, CallToolAction, CallToolObservation, env_name="guess_mcp",
                         max_concurrent_envs=args.max_sessions, state_cls=GuessState)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws_max_size=16 * 2**20)


if __name__ == "__main__":
    main()
