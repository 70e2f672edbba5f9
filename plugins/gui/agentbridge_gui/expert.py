"""A scripted expert that solves a few dozen MiniWoB++ task types by reading the DOM (used in tests and demos)."""

from __future__ import annotations

import re
from typing import Any

from agentbridge_gui.page import Element, PageState

EXPERT_TASKS = ("click-test", "click-test-2", "click-button", "click-link", "click-dialog", "focus-text",
                "enter-text", "enter-text-2", "click-checkboxes", "click-option",
                "click-test-transfer", "unicode-test", "click-button-sequence", "click-tab", "click-tab-2",
                "click-tab-2-hard", "click-collapsible", "click-widget", "focus-text-2", "enter-text-dynamic",
                "enter-password", "login-user", "click-checkboxes-transfer", "choose-list", "identify-shape",
                "grid-coordinate", "read-table", "find-word", "simple-arithmetic")

Action = tuple[str, dict[str, Any]]

_WIDGET_TAGS = {"radio": "input_radio", "checkbox": "input_checkbox", "text": "input_text", "textarea": "textarea",
                "button": "button"}
_SHAPE_BUTTONS = {"rect": "Rectangle", "circle": "Circle", "polygon": "Triangle"}


def _quoted(utterance: str) -> str | None:
    m = re.search(r'"(.*)"', utterance)
    return m.group(1) if m else None


def _find(state: PageState, tags: tuple[str, ...], text: str | None = None, cls: str | None = None) -> Element | None:
    for e in state.elements:
        if e.tag.startswith(tags) and (text is None or e.text.strip() == text) and (cls is None or cls in e.classes):
            return e
    return None


def _click(e: Element | None) -> Action | None:
    return ("click", {"ref": e.ref}) if e else None


def _submit(state: PageState) -> Action | None:
    return _click(_find(state, ("button",), "Submit") or _find(state, ("button",)))


def _fill(state: PageState, entries: list[tuple[Element | None, str]], button: Element | None = None) -> Action | None:
    """Type each text into its field (one field per step), then press ``button`` (default: Submit)."""
    for box, text in entries:
        if box is None:
            return None
        if str(box.value or "") != text:
            if box.value:
                return None  # wrong text already typed: the expert does not repair
            return ("type", {"text": text, "ref": box.ref})
    return _click(button) if button else _submit(state)


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


def _tab_with_link(state: PageState, target: str) -> Action | None:
    """Click the link ``target`` if the open tab shows it, else open the next tab (jQuery UI tabs)."""
    link = next((e for e in state.elements if "alink" in e.classes and e.text == target), None)
    if link is not None:
        return _click(link)
    tabs = [e for e in state.elements if e.tag == "li" and "ui-tabs-tab" in e.classes]
    active = next((i for i, e in enumerate(tabs) if "ui-tabs-active" in e.classes), -1)
    if not tabs:
        return None
    li = tabs[(active + 1) % len(tabs)]
    elements = state.elements
    i = elements.index(li)
    return _click(next((e for e in elements[i + 1:] if e.tag == "a"), None))


def _arithmetic(problem: str) -> str | None:
    m = re.match(r"\s*(-?\d+)\s*([-+x])\s*(-?\d+)", problem)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def next_action(task: str, state: PageState) -> Action | None:
    """The expert's next ``(tool, arguments)`` on this page, or None when it has nothing to do."""
    fields, utterance = state.fields, state.utterance
    if task in ("click-test", "click-test-2", "click-button", "click-test-transfer", "unicode-test"):
        target = fields.get("target")
        return _click(_find(state, ("button",), target) if target else _find(state, ("button",)))
    if task == "click-link":
        link = next((e for e in state.elements if "alink" in e.classes and e.text == fields.get("target")), None)
        return _click(link)
    if task == "click-dialog":
        return _click(next((e for e in state.elements if "ui-dialog-titlebar-close" in e.classes), None))
    if task == "focus-text":
        return _click(_find(state, ("input_text",)))
    if task == "focus-text-2":
        boxes = [e for e in state.elements if e.tag == "input_text"]
        n = int(fields.get("target", "0") or 0)
        return _click(boxes[n - 1]) if 0 < n <= len(boxes) else None
    if task == "click-button-sequence":  # a clicked button keeps the focus: ONE focused means TWO is next
        one = _find(state, ("button",), "ONE")
        return _click(_find(state, ("button",), "TWO") if one is not None and one.focused else one)
    if task == "click-tab":
        return _click(_find(state, ("a",), f"Tab #{fields.get('target')}"))
    if task in ("click-tab-2", "click-tab-2-hard"):
        return _tab_with_link(state, fields.get("target") or _quoted(utterance) or "")
    if task == "click-collapsible":
        header = _find(state, ("h3",), cls="ui-accordion-header")
        if header is not None and "ui-accordion-header-collapsed" in header.classes:
            return _click(header)
        return _submit(state)
    if task == "click-widget":
        tag = _WIDGET_TAGS.get(fields.get("target", ""))
        return _click(next((e for e in state.elements if e.tag == tag), None)) if tag else None
    if task in ("enter-text", "enter-text-2", "enter-text-dynamic"):
        target = fields.get("target") or _quoted(utterance) or ""
        if task == "enter-text-2":
            target = target.upper() if "upper" in utterance.lower() else target.lower()
        return _fill(state, [(_find(state, ("input_text",)), target)])
    if task == "enter-password":
        password = fields.get("target") or _quoted(utterance) or ""
        boxes = [e for e in state.elements if e.tag == "input_password"]
        return _fill(state, [(b, password) for b in boxes]) if len(boxes) == 2 else None
    if task == "login-user":
        user, password = fields.get("username", ""), fields.get("password", "")
        return _fill(state, [(_find(state, ("input_text",)), user), (_find(state, ("input_password",)), password)],
                     _find(state, ("button",), "Login"))
    if task == "read-table":
        cells = [e for e in state.elements if e.tag == "td"]
        key = fields.get("target")
        value = next((cells[i + 1].text for i, c in enumerate(cells[:-1]) if c.text == key), None)
        return _fill(state, [(_find(state, ("input_text",)), value)]) if value is not None else None
    if task == "find-word":
        paragraph = _find(state, ("p",))
        words = [re.sub(r"[^a-zA-Z0-9]", "", w) for w in (paragraph.text.split() if paragraph else [])]
        n = int(fields.get("target", "0") or 0)
        return _fill(state, [(_find(state, ("input_text",)), words[n - 1])]) if 0 < n <= len(words) else None
    if task == "simple-arithmetic":
        problem = next((e for e in state.elements if e.id == "math-problem"), None)
        answer = _arithmetic(problem.text) if problem else None
        return _fill(state, [(_find(state, ("input_text",)), answer)]) if answer is not None else None
    if task == "choose-list":  # typing into a focused <select> picks the option; the select keeps the focus
        select = _find(state, ("select",))
        if select is None:
            return None
        return _submit(state) if select.focused else ("type", {"text": fields.get("target", ""), "ref": select.ref})
    if task == "identify-shape":
        svg = next((e for e in state.elements if e.id == "area_svg"), None)
        shape = state.elements[state.elements.index(svg) + 1] if svg else None
        if shape is None or shape.tag not in ("text", *_SHAPE_BUTTONS):
            return None
        label = ("Number" if shape.text.isdigit() else "Letter") if shape.tag == "text" else _SHAPE_BUTTONS[shape.tag]
        return _click(_find(state, ("button",), label))
    if task == "grid-coordinate":
        point = f"({fields.get('x')},{fields.get('y')})"
        return _click(next((e for e in state.elements if e.tag == "circle" and e.id == point), None))
    if task in ("click-checkboxes", "click-checkboxes-transfer", "click-option"):
        kind = "radio" if task == "click-option" else "checkbox"
        targets = [v for k, v in fields.items() if k.startswith("target")]
        for label in targets:
            box = _label_input(state, label, kind)
            if box is not None and box.value is not True:
                return _click(box)
        return _submit(state)
    return None
