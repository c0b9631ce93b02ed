"""neuronscope: why is my model slow on Trainium/Inferentia — or on a GPU, or a CPU.

    import neuronscope as ns

    with ns.profile_neuron() as run:
        y = model(x)
    print(run.summary)
    print(run.diagnosis)

Names are imported on first use (PEP 562): ``import neuronscope`` is cheap, and the parts
that read saved runs (the CLI's ``show``, ``diff``, ``report``...) never import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from ._run import Run, RunStatus
    from .analysis.diff import Explanation
    from .capture.compare import compare
    from .report.comparison import Comparison
    from .analysis.ranks import RankComparison
    from .result import Coverage, RunResult
    from .capture.budget import Windows
    from ._stats import stats
    from .analysis.diagnosis import Diagnosis, Finding
    from .analysis.summary import OpStats, RegionStats, Summary, summarize
    from .analysis.memory_model import MemoryReport
    from .api import (
        compare_ranks,
        configure,
        diagnose,
        diagnose_memory,
        export_run,
        flush,
        last_run,
        load_run,
        load_trace,
        load_traces,
    )
    from .capture.arming import ArmRequest, arm, disarm
    from .capture.devices.neuron import NeuronOptions
    from .capture.profile import ProfileNeuron, profile_neuron
    from .capture.region import Region, region
    from .capture.steps import step
    from ._trigger import Trigger
    from .capture.triggers import SlowCalls
    from .errors import ConfigurationError, DeviceUnavailableError, NeuronscopeError, TraceLoadError
    from .trace.model import Event, EventKind, Trace

# public name -> module that defines it
_LAZY = {
    "ArmRequest": ".capture.arming",
    "SlowCalls": ".capture.triggers",
    "Trigger": "._trigger",
    "arm": ".capture.arming",
    "disarm": ".capture.arming",
    "ConfigurationError": ".errors",
    "Comparison": ".report.comparison",
    "Coverage": ".result",
    "DeviceUnavailableError": ".errors",
    "Diagnosis": ".analysis.diagnosis",
    "Event": ".trace.model",
    "EventKind": ".trace.kinds",
    "Explanation": ".analysis.diff",
    "Finding": ".analysis.diagnosis",
    "MemoryReport": ".analysis.memory_model",
    "NeuronOptions": ".capture.devices.neuron",
    "NeuronscopeError": ".errors",
    "OpStats": ".analysis.summary",
    "ProfileNeuron": ".capture.profile",
    "Region": ".capture.region",
    "RegionStats": ".analysis.summary",
    "RankComparison": ".analysis.ranks",
    "Run": "._run",
    "RunResult": ".result",
    "RunStatus": "._run",
    "Summary": ".analysis.summary",
    "Trace": ".trace.model",
    "TraceLoadError": ".errors",
    "Windows": ".capture.budget",
    "compare": ".capture.compare",
    "compare_ranks": ".api",
    "configure": ".api",
    "diagnose": ".api",
    "diagnose_memory": ".api",
    "export_run": ".api",
    "flush": ".api",
    "last_run": ".api",
    "load_run": ".api",
    "load_trace": ".api",
    "load_traces": ".api",
    "profile_neuron": ".capture.profile",
    "region": ".capture.region",
    "stats": "._stats",
    "step": ".capture.steps",
    "summarize": ".analysis.summary",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'neuronscope' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # next access is a plain attribute lookup
    return value


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext neuronscope``: registers the ``%%neuronscope`` cell magic, which profiles a
    cell and shows the run (docs/notebooks.md). Not in ``__all__``: IPython's hook, not an API."""
    from .capture.magic import load_ipython_extension as load

    load(ipython)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
