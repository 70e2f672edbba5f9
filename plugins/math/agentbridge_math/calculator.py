"""A safe arithmetic evaluator (no ``eval``) and the ``calculator`` tool."""

from __future__ import annotations

import ast
import operator
import warnings
from collections.abc import Callable
from fractions import Fraction

from agentbridge import tool

_BINARY: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 10**15


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > 64):
            raise ValueError("exponents must be whole numbers up to 64")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ValueError("division by zero")
        result = _BINARY[type(node.op)](left, right)
        if abs(result) > MAX_MAGNITUDE:
            raise ValueError("result is too large")
        return Fraction(result)
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:40]}; use numbers, + - * / // % ** and parentheses")


def evaluate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly; integers print as integers, others to 6 decimals."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        with warnings.catch_warnings():  # e.g. "3 (4)" warns "'int' object is not callable" while parsing
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value = _eval(tree)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression to compute, e.g. "(15 + 27) * 3".
    """
    return evaluate(expression)
