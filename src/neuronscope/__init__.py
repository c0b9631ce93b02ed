"""neuronscope: why is my model slow on Trainium/Inferentia — or on a GPU, or a CPU.

    import neuronscope as ns

    with ns.profile_neuron() as run:
        y = model(x)
    print(run.summary)
"""

from __future__ import annotations

from ._run import Run, RunStatus
from ._stats import stats
from ._version import __version__
from .analysis.summary import OpStats, RegionStats, Summary, summarize
from .api import configure, export_run, flush, last_run, load_run, load_trace
from .capture.devices.neuron import NeuronOptions
from .capture.profile import ProfileNeuron, profile_neuron
from .capture.region import Region, region
from .errors import ConfigurationError, DeviceUnavailableError, NeuronscopeError, TraceLoadError
from .trace.model import Event, EventKind, Trace

__all__ = [
    "ConfigurationError",
    "DeviceUnavailableError",
    "Event",
    "EventKind",
    "NeuronOptions",
    "NeuronscopeError",
    "OpStats",
    "ProfileNeuron",
    "Region",
    "RegionStats",
    "Run",
    "RunStatus",
    "Summary",
    "Trace",
    "TraceLoadError",
    "__version__",
    "configure",
    "export_run",
    "flush",
    "last_run",
    "load_run",
    "load_trace",
    "profile_neuron",
    "region",
    "stats",
    "summarize",
]
