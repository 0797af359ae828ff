"""Symbolic tensor dimensions of the segments: an int, a symbol (``"N"``) or arithmetic of symbols (``"3*N"``)."""

from __future__ import annotations

import ast
import operator

import numpy as np

from vsr.errors import BackendError

_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
            ast.Div: operator.floordiv}


def eval_dim(dim, env: dict[str, int]) -> int:
    """Value of a dimension: an int, a symbol (``"N"``) or an arithmetic expression of symbols (``"3*N"``)."""
    if isinstance(dim, (int, np.integer)):
        return int(dim)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise BackendError(f"dimension {dim!r}: symbol {node.id!r} is not bound (known: {sorted(env)})")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPS:
            return _DIM_OPS[type(node.op)](ev(node.left), ev(node.right))
        raise BackendError(f"dimension {dim!r} is not a simple arithmetic expression")

    try:
        return int(ev(ast.parse(str(dim), mode="eval")))
    except SyntaxError:
        raise BackendError(f"dimension {dim!r} is not a simple arithmetic expression") from None
