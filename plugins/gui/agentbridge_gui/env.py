"""``gui/miniwob``: a MiniWoB++ task in a pooled headless Chromium, observed as a screenshot or as DOM text.

Actions are tools: ``click(ref)``, ``click_xy(x, y)``, ``type(text, ref)``, ``press(key)``, ``scroll(direction)``.
Each returns the page after the action. The reward is the task's own (MiniWoB's time-scaled reward in
[-1, 1]), given as the step reward when the task ends. A bad action is an error message to the model; a browser
that dies or hangs ends the episode with an error (``finish_reason = "error"``, no reward).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from agentbridge import Message, StepResult, Task, ToolEnvironment, ToolSpec, tool
from agentbridge_gui import page
from agentbridge_gui.browser import Browser, BrowserError, BrowserPool, shared_pool
from agentbridge_gui.expert import EXPERT_TASKS, next_action
from agentbridge_gui.page import MAX_TYPE_CHARS, TASK_HEIGHT, TASK_WIDTH, ActionError, PageState

Observation = Literal["screenshot", "dom", "both"]
ACTIONS = ("click", "click_xy", "type", "press", "scroll")
DEFAULT_ACTIONS: dict[str, tuple[str, ...]] = {"dom": ("click", "type", "press", "scroll"),
                                               "screenshot": ("click_xy", "type", "press", "scroll"),
                                               "both": ACTIONS}
SYSTEM_PROMPT = ("You operate a web page through tools. Read the instruction, act with one tool call at a time, "
                 "and stop calling tools when the task is done.")


def render_dom(state: PageState, max_elements: int = 60) -> str:
    """Compact text view: one line per visible element that has text, a value or can be acted on."""
    lines = []
    for e in state.elements:
        if e.tag in ("body", "html") or e.id == "wrap":
            continue
        interactive = e.tag.startswith(("input", "button", "a", "select", "option", "textarea", "label")) or \
            "alink" in e.classes
        if not (e.text or interactive or (e.leaf and e.tag not in ("div", "span", "br", "t"))):
            continue
        parts = [f"[{e.ref}] {e.tag}"]
        if e.text:
            parts.append(json.dumps(e.text[:80], ensure_ascii=False))
        if e.value is not None and e.value != "":
            parts.append(f"value={json.dumps(e.value, ensure_ascii=False)}")
        if e.focused:
            parts.append("focused")
        lines.append(" ".join(parts))
    if len(lines) > max_elements:
        lines = [*lines[:max_elements], f"... {len(lines) - max_elements} more elements"]
    return "\n".join(lines)


class MiniWoBEnv(ToolEnvironment):
    """One MiniWoB++ episode per ``reset``; the browser comes from a pool and goes back on ``close``.

    Args (``environment.args``): ``task`` (default task when the dataset row names none), ``observation``
    (``screenshot`` | ``dom`` | ``both``), ``actions`` (subset of click, click_xy, type, press, scroll),
    ``browsers`` (pool size), ``time_limit_s`` (the task's own timer; it ends the episode with reward -1),
    ``op_timeout_s`` (a browser call slower than this means a hung browser), ``data_mode`` (train | test).
    """

    def __init__(self, task: str = "click-button", observation: Observation = "dom",
                 actions: Sequence[str] | None = None, browsers: int = 2, time_limit_s: float = 60.0,
                 op_timeout_s: float = 20.0, data_mode: str = "train", max_dom_elements: int = 60,
                 tools: Sequence[ToolSpec] | None = None, pool: BrowserPool | None = None,
                 max_output_chars: int = 4000) -> None:
        if observation not in DEFAULT_ACTIONS:
            raise ValueError(f"environment.args.observation: must be screenshot, dom or both, got {observation!r}")
        chosen = tuple(actions) if actions is not None else DEFAULT_ACTIONS[observation]
        unknown = [a for a in chosen if a not in ACTIONS]
        if unknown or not chosen:
            raise ValueError(f"environment.args.actions: unknown {unknown or 'empty list'}; "
                             f"choose from {', '.join(ACTIONS)}")
        if time_limit_s <= 0 or op_timeout_s <= 0:
            raise ValueError("environment.args: time_limit_s and op_timeout_s must be positive")
        fns: dict[str, Callable[..., Any]] = {"click": self.click, "click_xy": self.click_xy, "type": self.type_text,
                                              "press": self.press, "scroll": self.scroll}
        specs = [tool(fns[a], name=a) for a in chosen]
        # the browser layer enforces its own deadline per call; the tool timeout only backs it up
        super().__init__([*specs, *(tools or [])], timeout_s=4 * op_timeout_s + 5, max_output_chars=max_output_chars)
        self.default_task = task
        self.observation = observation
        self.actions = chosen
        self.browsers = browsers
        self.time_limit_s = time_limit_s
        self.op_timeout_s = op_timeout_s
        self.data_mode = data_mode
        self.max_dom_elements = max_dom_elements
        self._pool = pool
        self.browser: Browser | None = None
        self.state: PageState | None = None
        self.task_name = task
        self.screenshots: list[Any] = []  # every screenshot sent to the model this episode, in order
        self._fatal: BrowserError | None = None
        self._lock: asyncio.Lock | None = None
        self._finished = False
        self._t0 = 0.0
        self._grounding = {"gui/grounded_clicks": 0.0, "gui/grounding_hits": 0.0}  # this step's clicks on a target

    @property
    def pool(self) -> BrowserPool:
        if self._pool is None:
            self._pool = shared_pool(self.browsers, op_timeout_s=self.op_timeout_s)
        return self._pool

    # ---- episode ----
    async def reset(self, task: Task) -> list[Message]:
        self.task = task
        self.task_name = str(task.data.get("task") or self.default_task)
        page.task_url(self.task_name)  # unknown task: one clear line before any browser is touched
        self.screenshots, self._fatal, self._finished, self.state = [], None, False, None
        self._lock = asyncio.Lock()
        self._t0 = time.perf_counter()
        if self.browser is None:
            self.browser = await self.pool.acquire()
        browser = self.browser
        try:
            load_page = browser.url != self.task_name
            browser.url = None  # unknown until the page has loaded
            self.state = await browser.call(page.begin, self.task_name, load_page, task.data.get("seed"),
                                            str(task.data.get("mode", self.data_mode)),
                                            int(self.time_limit_s * 1000), self._want_shot)
            browser.url = self.task_name
        except BrowserError as e:
            self._fatal = e
            raise
        except Exception as e:  # a page that failed to start: the browser state is unknown, replace it
            self._fatal = BrowserError(f"episode start failed: {type(e).__name__}: {e}")
            raise self._fatal from None
        self._fill_fields()
        intro = f"Instruction: {self.state.utterance}\nTools: {', '.join(self.actions)}."
        self.history = [{"role": "user", "content": self._content(self.state, intro)}]
        return list(self.history)

    def _fill_fields(self) -> None:
        assert self.state is not None
        if self.state.fields:
            return
        from miniwob.fields import get_field_extractor

        try:
            self.state.fields = dict(get_field_extractor(self.task_name)(self.state.utterance))
        except Exception:  # noqa: BLE001 - fields only help the scripted expert
            self.state.fields = {}

    @property
    def _want_shot(self) -> bool:
        return self.observation in ("screenshot", "both")

    def _keep_fields(self, state: PageState) -> PageState:
        """Task fields come with the first observation; later ones inherit them."""
        if self.state is not None and not state.fields:
            state.fields = self.state.fields
        return state

    def _content(self, state: PageState, text: str) -> Any:
        if self.observation in ("dom", "both"):
            text = f"{text}\n{render_dom(state, self.max_dom_elements)}"
        if self.observation == "dom" or state.screenshot is None:
            return text
        self.screenshots.append(state.screenshot)
        return [{"type": "image", "image": state.screenshot}, {"type": "text", "text": text}]

    async def step(self, action: Message) -> StepResult:
        if self._fatal is not None:
            raise self._fatal
        self._grounding = dict.fromkeys(self._grounding, 0.0)
        result = await super().step(action)
        if self._fatal is not None:  # the browser died or hung during a tool call
            raise self._fatal
        metrics = {**result.metrics, **self._grounding, "gui/steps": 1.0}
        if self._finished and self.state is not None:
            metrics.update({"gui/success": float(self.state.raw_reward > 0),
                            "gui/timeout": float(self.state.reason == "timed out"),
                            "gui/episode_s": time.perf_counter() - self._t0})
            return StepResult(observation=result.observation, reward=self.state.reward, done=True, metrics=metrics)
        return StepResult(observation=result.observation, reward=result.reward, done=result.done, metrics=metrics)

    async def close(self) -> None:
        if self.browser is not None:
            self.pool.release(self.browser, broken=self._fatal is not None)
            self.browser = None

    # ---- actions ----
    async def _act(self, fn: Any, *args: Any, label: str) -> Any:
        """Run one page action, then observe; serialised so a turn's tool calls happen in order."""
        assert self._lock is not None and self.browser is not None, "reset() first"
        async with self._lock:
            if self._fatal is not None:
                raise self._fatal
            if self._finished:
                raise ActionError("the task is already over")
            try:  # action and observation in one browser call: one thread hand-off per step
                self.state = self._keep_fields(await self.browser.call(page.act, fn, args, self._want_shot))
            except BrowserError as e:
                self._fatal = e
                raise
            except ActionError:
                raise
            except Exception as e:
                raise ActionError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]) from None
            if self.state.done:
                self._finished = True
                reason = f" ({self.state.reason})" if self.state.reason else ""
                return f"{label}. The task is over: reward {self.state.reward:.3f}{reason}."
            return self._content(self.state, f"{label}.")

    def _check_ref(self, ref: int) -> None:
        if self._finished:
            raise ActionError("the task is already over")
        known = self.state.by_ref() if self.state is not None else {}
        if ref not in known:
            shown = ", ".join(str(r) for r in list(known)[:15])
            raise ActionError(f"no element with ref {ref} on the page; refs now: {shown}")

    async def click(self, ref: int) -> Any:
        """Click a page element by its ref (the number in brackets in the page view).

        Args:
            ref: The element's ref, e.g. 4.
        """
        self._check_ref(ref)
        return await self._act(page.click_ref, ref, label=f"Clicked [{ref}]")

    async def click_xy(self, x: int, y: int) -> Any:
        """Click a point of the screenshot.

        Args:
            x: Pixels from the left edge (0-159).
            y: Pixels from the top edge (0-209).
        """
        if not (0 <= x < TASK_WIDTH and 0 <= y < TASK_HEIGHT):
            raise ActionError(f"({x}, {y}) is off the screen; x must be in 0-{TASK_WIDTH - 1}, "
                              f"y in 0-{TASK_HEIGHT - 1}")
        self._ground(x, y)
        return await self._act(page.click_xy, x, y, label=f"Clicked ({x}, {y})")

    def _ground(self, x: int, y: int) -> None:
        """Count a click against the element the task's expert would act on now (its box from the DOM), when
        the task has an expert and its next action targets an element: the grounding reward's evidence."""
        if self.state is None or self.task_name not in EXPERT_TASKS:
            return
        step = next_action(self.task_name, self.state)
        target = self.state.by_ref().get(step[1]["ref"]) if step is not None and "ref" in step[1] else None
        if target is None:
            return
        self._grounding["gui/grounded_clicks"] += 1.0
        inside = target.left <= x < target.left + target.width and target.top <= y < target.top + target.height
        self._grounding["gui/grounding_hits"] += float(inside)

    async def type_text(self, text: str, ref: int | None = None) -> Any:
        """Type text into the focused field, or into the element ``ref`` after focusing it.

        Args:
            text: The text to type (at most 200 characters).
            ref: Optional ref of the field to type into.
        """
        if len(text) > MAX_TYPE_CHARS:
            raise ActionError(f"text has {len(text)} characters; type at most {MAX_TYPE_CHARS} at a time")
        if any(ord(c) < 32 and c not in "\n\t" or 0xE000 <= ord(c) <= 0xF8FF for c in text):
            raise ActionError("text has control characters; use press(key) for special keys")
        if ref is not None:
            self._check_ref(ref)
        return await self._act(page.type_text, text, ref, label=f"Typed {json.dumps(text[:40])}")

    async def press(self, key: str) -> Any:
        """Press a key or a combination.

        Args:
            key: A key name (Enter, Tab, Backspace, ArrowDown, ...), one character, or a combination like Ctrl+a.
        """
        keys, modifiers = page.parse_key(key)
        return await self._act(page.press, keys, modifiers, label=f"Pressed {key}")

    async def scroll(self, direction: Literal["up", "down"], x: int = TASK_WIDTH // 2,
                     y: int = TASK_HEIGHT // 2) -> Any:
        """Scroll the page (or the scrollable element under the point) up or down.

        Args:
            direction: up or down.
            x: Pixels from the left edge where the wheel turns (default: centre).
            y: Pixels from the top edge where the wheel turns (default: centre).
        """
        if not (0 <= x < TASK_WIDTH and 0 <= y < TASK_HEIGHT):
            raise ActionError(f"({x}, {y}) is off the screen; x must be in 0-{TASK_WIDTH - 1}, "
                              f"y in 0-{TASK_HEIGHT - 1}")
        delta = 50 if direction == "down" else -50
        return await self._act(page.scroll, x, y, delta, label=f"Scrolled {direction}")

    # ---- scripted expert ----
    def expert_action(self) -> str | None:
        """The next tool call of a DOM-reading expert (click, type, submit), or a final answer. A task without an
        expert is an error naming the tasks that have one (the scripted policy never plays a dummy answer)."""
        if self.task_name not in EXPERT_TASKS:
            raise ValueError(f"MiniWoB task '{self.task_name}' has no scripted expert (experts: "
                             f"{', '.join(EXPERT_TASKS)})")
        if self.state is None or self._finished:
            return "<answer>done</answer>"
        step = next_action(self.task_name, self.state)
        if step is None:
            return "<answer>done</answer>"
        name, args = step
        if "ref" in args and (name == "click" and "click" not in self.actions):
            e = self.state.by_ref()[args["ref"]]
            name, args = "click_xy", {"x": e.center[0], "y": e.center[1]}
        elif name == "type" and "ref" in args and "click" not in self.actions:
            e = self.state.by_ref()[args["ref"]]
            if not e.focused:
                name, args = "click_xy", {"x": e.center[0], "y": e.center[1]}
            else:
                args = {"text": args["text"]}
        call = json.dumps({"name": name, "arguments": args})
        return f"<tool_call>\n{call}\n</tool_call>"


def grounding_reward(trajectory: Any, task: Any) -> float:
    """InfiGUI-G1-style grounding: the share of the episode's coordinate clicks that landed inside the box of the
    element the task's expert would have acted on at that step (from the DOM); 0 without such clicks."""
    clicks = trajectory.metrics.get("gui/grounded_clicks", 0.0)
    return float(trajectory.metrics.get("gui/grounding_hits", 0.0) / clicks) if clicks else 0.0


def task_reward(trajectory: Any, task: Any) -> float:
    """1.0 when the MiniWoB task ended with a positive reward (success), else 0 (logged as a component)."""
    return float(trajectory.finish_reason == "done" and bool(trajectory.turns) and trajectory.turns[-1].reward > 0)
