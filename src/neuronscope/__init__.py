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

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs (``X as X``: an explicit re-export)
    from ._run import Run as Run, RunStatus as RunStatus
    from .analysis.explain import Explanation as Explanation
    from .capture.compare import compare as compare
    from .report.comparison import Comparison as Comparison
    from .analysis.ranks import RankComparison as RankComparison
    from .result import Coverage as Coverage, RunResult as RunResult
    from .capture.budget import Windows as Windows
    from ._stats import stats as stats
    from .analysis.diagnosis import Diagnosis as Diagnosis, Finding as Finding
    from .analysis.summary import OpStats as OpStats, RegionStats as RegionStats, Summary as Summary, summarize as summarize
    from .analysis.memory_model import MemoryReport as MemoryReport
    from .api import (
        compare_ranks as compare_ranks,
        configure as configure,
        diagnose as diagnose,
        diagnose_memory as diagnose_memory,
        export_run as export_run,
        flush as flush,
        last_run as last_run,
        load_run as load_run,
        load_trace as load_trace,
        load_traces as load_traces,
    )
    from .capture.arming import ArmRequest as ArmRequest, arm as arm, disarm as disarm
    from .capture.devices.neuron import NeuronOptions as NeuronOptions
    from .capture.profile import ProfileNeuron as ProfileNeuron, profile_neuron as profile_neuron
    from .capture.region import Region as Region, region as region
    from .capture.steps import step as step
    from ._trigger import Trigger as Trigger
    from .capture.triggers import SlowCalls as SlowCalls
    from .errors import (
        ConfigurationError as ConfigurationError,
        DeviceUnavailableError as DeviceUnavailableError,
        NeuronscopeError as NeuronscopeError,
        TraceLoadError as TraceLoadError,
    )
    from .trace.model import Event as Event, EventKind as EventKind, Trace as Trace

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
    "Explanation": ".analysis.explain",
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
