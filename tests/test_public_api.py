import neuronscope

EXPECTED = {
    "Comparison",
    "Explanation",
    "RankComparison",
    "RunResult",
    "Coverage",
    "Windows",
    "ArmRequest",
    "SlowCalls",
    "Trigger",
    "arm",
    "disarm",
    "ConfigurationError",
    "DeviceUnavailableError",
    "Diagnosis",
    "Event",
    "EventKind",
    "Finding",
    "MemoryReport",
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
    "compare",
    "compare_ranks",
    "configure",
    "diagnose",
    "diagnose_memory",
    "export_run",
    "flush",
    "last_run",
    "load_run",
    "load_trace",
    "load_traces",
    "profile_neuron",
    "region",
    "stats",
    "step",
    "summarize",
}


def test_all_is_exactly_the_intended_public_api():
    assert set(neuronscope.__all__) == EXPECTED


def test_all_is_sorted_and_resolvable():
    assert neuronscope.__all__ == sorted(neuronscope.__all__)
    for name in neuronscope.__all__:
        assert getattr(neuronscope, name) is not None


def test_exception_hierarchy():
    for exc in (neuronscope.ConfigurationError, neuronscope.DeviceUnavailableError, neuronscope.TraceLoadError):
        assert issubclass(exc, neuronscope.NeuronscopeError)
    assert issubclass(neuronscope.ConfigurationError, ValueError)


def test_torch_neuronx_is_not_imported_at_import_time():
    import subprocess
    import sys

    code = "import sys, neuronscope; print('torch_neuronx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_is_cheap_and_torch_free():
    """``import neuronscope`` and reading saved runs must not import torch (the CLI's start-up)."""
    import subprocess
    import sys

    code = (
        "import sys, neuronscope; from neuronscope.analysis.summary import Summary; "
        "from neuronscope.analysis.diagnosis import Diagnosis; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_module_defines_what_its_all_names():
    # `from neuronscope.x import *` works for every module: __all__ names only what exists
    import importlib
    import pkgutil

    missing = []
    for info in pkgutil.walk_packages(neuronscope.__path__, "neuronscope."):
        if info.name.startswith("neuronscope.testing._fake") or info.name.endswith("__main__"):
            continue  # stand-ins meant to be imported into a fresh interpreter as other packages
        module = importlib.import_module(info.name)
        missing += [f"{info.name}.{n}" for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert missing == []
