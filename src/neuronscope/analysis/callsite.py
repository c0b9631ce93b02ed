"""The line that made a call, not the first line of the function that made it.

torch's Python tracer (``with_stack=True``) names each Python frame ``file.py(12): func`` by
the function's *first* line — the decorator of a decorated function, else the ``def`` — and
records no line for what runs inside it. A finding about an ``.item()`` three lines into
``decode`` would point at ``@torch.no_grad()``. So we find the line ourselves, after the
fact: the call the frame was making is its child event in the trace (``<built-in method item
of Tensor object at …>``, ``torch/_tensor.py(…): __float__``) or, for an operator (``x * w``
runs ``aten::mul`` with no Python call around it), the op itself. That name is matched with
the calls in the function's source (``ast``); the k-th such call made in the frame is the
k-th matching call in source order (cycling, for loops). Where the source cannot be read (a
trace from another machine) or nothing matches, the frame's own line is kept.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
import sys

#: a Python event of the tracer: ``file.py(12): func`` (diagnosis/categories.py reads it too)
FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
#: a C call: ``<built-in method item of Tensor object at 0x…>``, ``<built-in function len>``
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>\w+)")
#: what the user wrote for a method torch's tracer shows by its dunder name
_DUNDER = {
    "__float__": "float",
    "__int__": "int",
    "__bool__": "bool",
    "__len__": "len",
    "__format__": "format",
    "__repr__": "repr",
    "__str__": "str",
    "__index__": "int",
    "__array__": "asarray",
}
_BINOPS: dict[str, tuple[type, ...]] = {
    "add": (ast.Add,),
    "sub": (ast.Sub,),
    "rsub": (ast.Sub,),
    "mul": (ast.Mult,),
    "div": (ast.Div,),
    "true_divide": (ast.Div,),
    "floor_divide": (ast.FloorDiv,),
    "remainder": (ast.Mod,),
    "pow": (ast.Pow,),
    "matmul": (ast.MatMult,),
    "mm": (ast.MatMult,),
    "bmm": (ast.MatMult,),
    "bitwise_and": (ast.BitAnd,),
    "bitwise_or": (ast.BitOr,),
    "bitwise_xor": (ast.BitXor,),
}
_COMPARE = {"eq": ast.Eq, "ne": ast.NotEq, "lt": ast.Lt, "le": ast.LtE, "gt": ast.Gt, "ge": ast.GtE}
#: ops a value read runs, with no Python call of their own under float(t) / int(t) / bool(t)
_VALUE_READ = {"item", "_local_scalar_dense", "is_nonzero"}
_READ_CALLS = {"item", "float", "int", "bool", "complex", "tolist"}
_INDEXING = {"select", "slice", "index", "index_put_", "copy_", "_index_put_impl_"}


def frame_line(frame_name: str, callee_name: str, occurrence: int) -> int | None:
    """The line in ``frame_name``'s function (a tracer event name) of its ``occurrence``-th call
    to ``callee_name`` (a Python event's or an op's name), or None where it cannot be told."""
    m = FRAME.match(frame_name)
    if m is None:
        return None
    lines = _calls(m.group("file"), int(m.group("line")), m.group("func"), _key(callee_name))
    if not lines:
        return None
    return lines[occurrence % len(lines)]


def with_line(frame_name: str, line: int) -> str:
    """``file.py:LINE (func)`` for a tracer event ``file.py(12): func``."""
    m = FRAME.match(frame_name)
    if m is None:
        return frame_name
    return f"{m.group('file')}:{line} ({m.group('func')})"


def _key(callee: str) -> str:
    """What to look for in the source: a called name, or ``op:NAME`` for an aten op."""
    m = _BUILTIN.match(callee)
    if m:
        return m.group("name")
    m = FRAME.match(callee)
    if m:
        func = m.group("func")
        if func in ("_call_impl", "_wrapped_call_impl", "__call__"):
            return "__call__"
        return _DUNDER.get(func, func)
    if "::" in callee:
        return "op:" + callee.split("::", 1)[1].split(".", 1)[0]
    return callee


@functools.lru_cache(maxsize=256)
def _calls(path: str, first_line: int, func: str, key: str) -> tuple[int, ...]:
    """Source lines of the calls that match ``key`` in the function named ``func`` whose first
    line (decorators included) is ``first_line``, in source order."""
    scope = _scope(path, first_line, func)
    if scope is None:
        return ()
    found = [node for node in _walk_scope(scope) if _matches(node, key)]
    return tuple(sorted({getattr(n, "lineno", first_line) for n in found}))


@functools.lru_cache(maxsize=64)
def _tree(path: str) -> ast.Module | None:
    lines = linecache.getlines(path)  # relative names are looked up along sys.path
    if not lines:
        return None
    try:
        return ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None


def _scope(path: str, first_line: int, func: str) -> ast.AST | None:
    tree = _tree(path)
    if tree is None:
        return None
    if func == "<module>":
        return tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if start == first_line or node.lineno == first_line:
                return node
        elif func.startswith("<") and isinstance(node, _INNER_SCOPES) and node.lineno == first_line:
            return node  # <lambda>, <listcomp>, <genexpr>: the expression on that line
    return None


# scopes that run as frames of their own (comprehensions stopped being frames in 3.12)
_INNER_SCOPES: tuple[type[ast.stmt | ast.expr], ...] = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef) + (
    (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp) if sys.version_info < (3, 12) else ()
)


def _walk_scope(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope``, not those of the functions (frames of their own) inside it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        todo = list(scope.body)  # not the decorators nor the defaults: they ran in the caller
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, _INNER_SCOPES):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _matches(node: ast.AST, key: str) -> bool:
    if key.startswith("op:"):
        op = key[3:]
        base = op.rstrip("_")
        if isinstance(node, ast.Call):
            name = _called_name(node)
            return name in (op, base) or (op in _VALUE_READ and name in _READ_CALLS)
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            return isinstance(node.op, _BINOPS.get(base, ()))
        if isinstance(node, ast.Compare):
            return any(isinstance(o, _COMPARE[base]) for o in node.ops) if base in _COMPARE else False
        if isinstance(node, ast.UnaryOp):
            return base == "neg" and isinstance(node.op, ast.USub)
        if isinstance(node, ast.Subscript):
            return base in _INDEXING
        return False
    if not isinstance(node, ast.Call):
        return False
    if key == "__call__":
        # a module called as model(x): a call through a name or attribute that is not a method
        # torch's tracer would have shown by its own name
        return isinstance(node.func, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return _called_name(node) == key
