"""The ``%%neuronscope`` cell magic (IPython, Jupyter).

    %load_ext neuronscope

    %%neuronscope --record-shapes --name train --top 15
    y = model(x)

profiles the cell with :func:`~neuronscope.profile_neuron` and shows the run (its
``_repr_html_``: verdict and top ops); the run is ``ns.last_run()`` afterwards. The cell runs in
the notebook's namespace, as without the magic; when it ends in an expression, that is the
cell's value. An exception in the cell is shown after the run (the run records it as
``run.error``).

IPython is imported only here, when the extension is loaded.
"""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["load_ipython_extension", "profile_cell"]


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%neuronscope`` on ``ipython`` (``%load_ext neuronscope`` calls it)."""
    from IPython.core import magic_arguments as ma

    @ma.magic_arguments()
    @ma.argument("--record-shapes", action="store_true", help="record input shapes: FLOPs, bytes and the roofline per op")
    @ma.argument("--name", default=None, help="the run's name (default: cell)")
    @ma.argument("--top", type=int, default=10, help="ops shown in the table (default 10; run.summary has all)")
    def neuronscope(line: str, cell: str) -> Any:
        """Profile this cell with neuronscope.profile_neuron() and show the run; ns.last_run() has it."""
        __tracebackhide__ = True  # an error in the cell shows the cell's frames, not these
        args = ma.parse_argstring(neuronscope, line)
        return profile_cell(ipython, cell, name=args.name, record_shapes=args.record_shapes, top=args.top)

    ipython.register_magic_function(neuronscope, magic_kind="cell", magic_name="neuronscope")


def profile_cell(ipython: Any, cell: str, *, name: str | None = None, record_shapes: bool = False, top: int = 10) -> Any:
    """Run ``cell`` in ``ipython``'s namespace inside ``profile_neuron(name, record_shapes)``,
    display the run with its ``top`` ops, and return the cell's last expression (None if none)."""
    __tracebackhide__ = True
    from IPython.core.error import UsageError
    from IPython.display import display

    from ..analysis.notebook import run_html
    from .profile import profile_neuron

    if top < 0:
        raise UsageError(f"%%neuronscope --top {top}: the number of ops to show is 0 or more")
    run = None

    def show() -> None:
        if run is not None:
            display({"text/html": run_html(run, top=top), "text/plain": repr(run)}, raw=True)

    try:
        with profile_neuron(name=name or "cell", record_shapes=record_shapes) as run:
            value = _execute(ipython, cell)
    except Exception:
        show()
        raise
    show()
    return value


def _execute(ipython: Any, cell: str) -> Any:
    """What IPython does with a cell (its input transforms: ``!cmd``, ``%magic``; its AST
    transformers), in the user's namespace; the value of a last expression is returned."""
    __tracebackhide__ = True
    source = ipython.transform_cell(cell)
    tree = ipython.transform_ast(ipython.compile.ast_parse(source))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:  # tracebacks show the cell's lines, as for any cell
        filename = ipython.compile.cache(source)
    except Exception:  # noqa: BLE001 - an IPython without the cache: a plain name
        filename = "<%%neuronscope>"
    namespace = ipython.user_ns
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        return eval(compile(last, filename, "eval"), namespace)
    return None
