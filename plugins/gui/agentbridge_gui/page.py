"""MiniWoB++ pages in a Selenium driver: load a task, start an episode, observe, act (all blocking).

These use the task page's own JavaScript API (``core.*``, ``WOB_*`` globals), as the ``miniwob`` package does,
in fewer round trips: one script starts an episode, one reads utterance + DOM + done/reward.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

MINIWOB_TASKS_DIR = "html/miniwob"
TASK_WIDTH, TASK_HEIGHT = 160, 210  # the task area (top-left of the page), in CSS pixels
MAX_TYPE_CHARS = 200

_START = """
core.endEpisode(0);
if (arguments[0] !== null) { Math.seedrandom(arguments[0]); }
core.setDataMode(arguments[1]);
core.EPISODE_MAX_TIME = arguments[2];
core.startEpisodeReal();
return WOB_TASK_READY;
"""
_OBSERVE = """
var done = WOB_DONE_GLOBAL;  // an ended episode is not shown to anyone: skip the DOM walk (as miniwob does)
return {utterance: core.getUtterance(), dom: done ? null : core.getDOMInfo(), done: done,
        reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON,
        inner: [window.innerWidth, window.innerHeight]};
"""
_STATUS = 'return {done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, ' \
          'reason: WOB_REWARD_REASON};'
_CLICK_REF = """
if (WOB_DONE_GLOBAL) { return 'the task is already over'; }
if (!core.previousDOMInfo || !(arguments[0] in core.previousDOMInfo)) { return 'no element with ref ' + arguments[0]; }
return core.elementClick(arguments[0]);
"""
_FOCUS_REF = """
if (!core.previousDOMInfo || !(arguments[0] in core.previousDOMInfo)) { return 'no element with ref ' + arguments[0]; }
var el = core.previousDOMInfo[arguments[0]];
if (el.focus) { el.focus(); }
return true;
"""


class ActionError(ValueError):
    """The action cannot be done on this page (bad ref, coordinates, key, text); reported to the model."""


def task_url(task: str) -> str:
    """``file://`` URL of a MiniWoB++ task page shipped inside the ``miniwob`` wheel."""
    import miniwob

    path = Path(miniwob.__file__).parent / MINIWOB_TASKS_DIR / f"{task}.html"
    if not path.is_file():
        raise ValueError(f"environment.args.task: unknown MiniWoB++ task '{task}' (no {path.name} in the miniwob "
                         "package); see agentbridge_gui.tasks.available_tasks()")
    return path.as_uri()


@dataclass
class Element:
    """One visible DOM element (or text node) with the ref MiniWoB assigned to it this episode."""

    ref: int
    tag: str
    text: str
    value: Any
    left: float
    top: float
    width: float
    height: float
    classes: str = ""
    id: str = ""
    focused: bool = False
    leaf: bool = True

    @property
    def center(self) -> tuple[int, int]:
        return int(self.left + self.width / 2), int(self.top + self.height / 2)


@dataclass
class PageState:
    """What one observation saw: instruction, elements by ref, screenshot (None in DOM mode), episode status."""

    utterance: str
    elements: list[Element]
    screenshot: Image.Image | None
    done: bool
    reward: float
    raw_reward: float
    reason: Any
    fields: dict[str, str] = field(default_factory=dict)

    def by_ref(self) -> dict[int, Element]:
        return {e.ref: e for e in self.elements}


def _flatten(node: dict[str, Any] | None, out: list[Element]) -> None:
    if not node:
        return
    children = node.get("children") or []
    text_children = [c for c in children if c.get("tag") == "t"]
    text = node.get("text")
    if children and len(text_children) == len(children):  # like miniwob's DOMElement: fold text-only children
        text, children = " ".join(str(c.get("text", "")) for c in children), []
    out.append(Element(ref=int(node["ref"]), tag=str(node["tag"]).lower(), text=str(text or "").strip(),
                       value=node.get("value"), left=float(node["left"]), top=float(node["top"]),
                       width=float(node["width"]), height=float(node["height"]),
                       classes=str(node.get("classes") or ""), id=str(node.get("id") or ""),
                       focused=bool(node.get("focused")), leaf=not children))
    for child in children:
        _flatten(child, out)


def load(driver: Any, task: str) -> None:
    """Open the task page (once per browser per task) and wait for its start cover."""
    driver.get(task_url(task))
    for _ in range(200):
        if driver.execute_script("return typeof core !== 'undefined' && !!document.getElementById('sync-task-cover');"):
            return
        time.sleep(0.025)
    raise RuntimeError(f"MiniWoB++ task page {task} did not load")


def begin(driver: Any, task: str, load_page: bool, seed: Any, mode: str, max_time_ms: int,
          with_screenshot: bool) -> PageState:
    """Open the task page if asked, start an episode and observe it: one call on the browser thread."""
    if load_page:
        load(driver, task)
    start(driver, seed, mode, max_time_ms)
    return observe(driver, with_screenshot)


def act(driver: Any, fn: Callable[..., None], args: tuple[Any, ...], with_screenshot: bool) -> PageState:
    """Do ``fn(driver, *args)`` and observe the page right after: one call on the browser thread, not two."""
    fn(driver, *args)
    return observe(driver, with_screenshot)


def start(driver: Any, seed: Any, mode: str, max_time_ms: int) -> None:
    """Begin an episode with this seed; blocks until the task says it is ready (at most 1 s, as miniwob does)."""
    ready = driver.execute_script(_START, seed, mode, int(max_time_ms))
    for _ in range(20):
        if ready:
            return
        time.sleep(0.05)
        ready = driver.execute_script("return WOB_TASK_READY;")
    raise RuntimeError("the MiniWoB++ task did not become ready")


def screenshot(driver: Any, inner: tuple[int, int]) -> Image.Image:
    """The task area as the browser renders it now (same crop and scale as ``miniwob``)."""
    png = driver.get_screenshot_as_png()
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    img = img.crop((0, 0, TASK_WIDTH * w // inner[0], TASK_HEIGHT * h // inner[1]))
    return img.resize((TASK_WIDTH, TASK_HEIGHT)) if img.size != (TASK_WIDTH, TASK_HEIGHT) else img


def observe(driver: Any, with_screenshot: bool) -> PageState:
    """Utterance, elements, status (one script) and, when asked, the screenshot taken right after.

    Once the episode has ended there is nothing left to act on: no elements and no screenshot.
    """
    raw = driver.execute_script(_OBSERVE)
    utterance = raw["utterance"]
    fields: dict[str, str] = {}
    if isinstance(utterance, dict):
        fields = {str(k): str(v) for k, v in (utterance.get("fields") or {}).items()}
        utterance = utterance.get("utterance", "")
    elements: list[Element] = []
    _flatten(raw["dom"], elements)
    shot = screenshot(driver, tuple(raw["inner"])) if with_screenshot and not raw["done"] else None
    return PageState(utterance=str(utterance), elements=elements, screenshot=shot, done=bool(raw["done"]),
                     reward=float(raw["reward"] or 0.0), raw_reward=float(raw["raw_reward"] or 0.0),
                     reason=raw["reason"], fields=fields)


def status(driver: Any) -> dict[str, Any]:
    return driver.execute_script(_STATUS)


def click_ref(driver: Any, ref: int) -> None:
    result = driver.execute_script(_CLICK_REF, int(ref))
    if result is not True:
        raise ActionError(str(result))


def click_xy(driver: Any, x: float, y: float) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver, duration=0)
    chain.w3c_actions.pointer_action.move_to_location(int(x), int(y))
    chain.w3c_actions.pointer_action.click()
    chain.w3c_actions.perform()


def type_text(driver: Any, text: str, ref: int | None) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    if ref is not None:
        result = driver.execute_script(_FOCUS_REF, int(ref))
        if result is not True:
            raise ActionError(str(result))
    chain = ActionChains(driver, duration=0)
    for ch in text:
        chain.w3c_actions.key_action.key_down(ch)
        chain.w3c_actions.key_action.key_up(ch)
    chain.perform()


def press(driver: Any, keys: list[str], modifiers: list[str]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver, duration=0)
    for m in modifiers:
        chain.w3c_actions.key_action.key_down(m)
    for k in keys:
        chain.w3c_actions.key_action.key_down(k)
        chain.w3c_actions.key_action.key_up(k)
    for m in reversed(modifiers):
        chain.w3c_actions.key_action.key_up(m)
    chain.perform()


def scroll(driver: Any, x: int, y: int, delta_y: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver)
    chain.w3c_actions.wheel_action.scroll(x=int(x), y=int(y), delta_y=int(delta_y), duration=150)
    chain.w3c_actions.perform()


def parse_key(key: str) -> tuple[list[str], list[str]]:
    """``"Enter"``, ``"<Enter>"``, ``"a"``, ``"C-a"``/``"Ctrl+a"`` → (keys, modifiers) as WebDriver key codes."""
    from miniwob.constants import WEBDRIVER_MODIFIER_KEYS, WEBDRIVER_SPECIAL_KEYS

    names = {k.strip("<>").lower(): v for k, v in WEBDRIVER_SPECIAL_KEYS.items()}
    aliases = {"ctrl": "C-", "control": "C-", "shift": "S-", "alt": "A-", "meta": "M-", "cmd": "M-"}
    raw = key.strip()
    if not raw or len(raw) > 40:
        raise ActionError(f"unknown key {key[:40]!r}; use a name like Enter, Tab, Backspace, ArrowDown "
                          "or one character")
    parts = raw.split("+") if "+" in raw and len(raw) > 1 else [raw]
    modifiers: list[str] = []
    for part in parts[:-1]:
        prefix = aliases.get(part.strip().lower())
        if prefix is None:
            raise ActionError(f"unknown modifier {part!r}; use Ctrl, Shift, Alt or Meta")
        modifiers.append(WEBDRIVER_MODIFIER_KEYS[prefix])
    last = parts[-1]
    while last[:2] in WEBDRIVER_MODIFIER_KEYS and len(last) > 2:
        modifiers.append(WEBDRIVER_MODIFIER_KEYS[last[:2]])
        last = last[2:]
    if len(last) == 1:
        return [last], modifiers
    code = names.get(last.strip("<>").lower())
    if code is None:
        known = ", ".join(sorted(k.strip("<>") for k in WEBDRIVER_SPECIAL_KEYS)[:12])
        raise ActionError(f"unknown key {last[:40]!r}; use one character or a key name ({known}, ...)")
    return [code], modifiers
