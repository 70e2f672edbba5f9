"""A scripted expert that solves a handful of MiniWoB++ task types by reading the DOM (used in tests and demos)."""

from __future__ import annotations

import re
from typing import Any

from agentbridge_gui.page import Element, PageState

EXPERT_TASKS = ("click-test", "click-test-2", "click-button", "click-link", "click-dialog", "focus-text",
                "enter-text", "enter-text-2", "click-checkboxes", "click-option")

Action = tuple[str, dict[str, Any]]


def _quoted(utterance: str) -> str | None:
    m = re.search(r'"(.*)"', utterance)
    return m.group(1) if m else None


def _find(state: PageState, tags: tuple[str, ...], text: str | None = None, cls: str | None = None) -> Element | None:
    for e in state.elements:
        if e.tag.startswith(tags) and (text is None or e.text.strip() == text) and (cls is None or cls in e.classes):
            return e
    return None


def _submit(state: PageState) -> Action | None:
    button = _find(state, ("button",), "Submit") or _find(state, ("button",))
    return ("click", {"ref": button.ref}) if button else None


def _label_input(state: PageState, label: str, kind: str) -> Element | None:
    """The checkbox/radio whose label text is ``label`` (MiniWoB wraps them as <label><input> text</label>)."""
    by_ref = state.elements
    for i, e in enumerate(by_ref):
        if e.tag == "label" and e.text.strip() == label:
            for child in by_ref[i + 1:i + 3]:
                if child.tag == f"input_{kind}":
                    return child
        if e.tag == f"input_{kind}" and i + 1 < len(by_ref) and by_ref[i + 1].text.strip() == label:
            return e
    return None


def next_action(task: str, state: PageState) -> Action | None:
    """The expert's next ``(tool, arguments)`` on this page, or None when it has nothing to do."""
    fields, utterance = state.fields, state.utterance
    if task in ("click-test", "click-test-2", "click-button"):
        target = fields.get("target")
        button = _find(state, ("button",), target) if target else _find(state, ("button",))
        return ("click", {"ref": button.ref}) if button else None
    if task == "click-link":
        link = next((e for e in state.elements if "alink" in e.classes and e.text == fields.get("target")), None)
        return ("click", {"ref": link.ref}) if link else None
    if task == "click-dialog":
        close = next((e for e in state.elements if "ui-dialog-titlebar-close" in e.classes), None)
        return ("click", {"ref": close.ref}) if close else None
    if task == "focus-text":
        box = _find(state, ("input_text",))
        return ("click", {"ref": box.ref}) if box else None
    if task in ("enter-text", "enter-text-2"):
        target = fields.get("target") or _quoted(utterance) or ""
        if task == "enter-text-2":
            target = target.upper() if "upper" in utterance.lower() else target.lower()
        box = _find(state, ("input_text",))
        if box is None:
            return None
        if str(box.value or "") != target:
            if box.value:
                return None  # wrong text already typed: the expert does not repair
            return ("type", {"text": target, "ref": box.ref})
        return _submit(state)
    if task in ("click-checkboxes", "click-option"):
        kind = "checkbox" if task == "click-checkboxes" else "radio"
        targets = [v for k, v in fields.items() if k.startswith("target")]
        for label in targets:
            box = _label_input(state, label, kind)
            if box is not None and box.value is not True:
                return ("click", {"ref": box.ref})
        return _submit(state)
    return None
