"""The interface every device backend implements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from torch.profiler import ProfilerActivity

from ...result import CaptureFacts, DeviceFacts

if TYPE_CHECKING:
    from ...trace.model import Trace

__all__ = ["DeviceBackend"]


class DeviceBackend:
    """How to capture on one kind of device. Subclasses override what differs."""

    name: ClassVar[str] = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def install_hint(cls) -> str:
        return ""

    def activities(self) -> list[ProfilerActivity]:
        return [ProfilerActivity.CPU]

    def experimental_config(self, raw_dir: Path | None, *, all_threads: bool = False) -> Any | None:
        """A ``torch._C._profiler._ExperimentalConfig`` for torch.profiler, or None.

        ``all_threads``: record every thread of the process (torch's ``profile_all_threads``),
        not only the one that starts the profiler.
        """
        if not all_threads:
            return None
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)

    def synchronize(self) -> None:
        """Wait for queued device work, so it lands inside the profile window."""

    def on_trace_ready(self, prof: Any, raw_dir: Path | None) -> None:
        """Hook called with the stopped ``torch.profiler.profile`` (e.g. to export raw files)."""

    # -- the run directory -------------------------------------------------------------------
    #: the device writes raw files while the profile runs, so the run directory must exist
    #: when it starts (Neuron); elsewhere the output worker makes it afterwards
    needs_run_dir_at_start: ClassVar[bool] = False

    # -- memory (profile_neuron(memory=...)) --------------------------------------------------------
    def memory_start(self, mode: str) -> dict[str, Any]:
        """At the start of a capture with the memory stage on (user's thread): begin recording
        what the device needs and return its state then (``CaptureFacts.device_start``)."""
        return {}

    def memory_end(self, mode: str) -> dict[str, Any]:
        """At the end of that capture, after the device synchronised (``CaptureFacts.device_end``)."""
        return {}

    def memory_facts(self, capture: CaptureFacts, *, error: str | None, start_ns: int) -> dict[str, Any]:
        """(analysis worker) What the memory stage knows from the device beyond the trace's
        allocator records: device totals, an out-of-memory table."""
        return {}

    def write_memory_files(self, run_dir: Path, mode: str) -> dict[str, Any]:
        """(output worker) Device memory files for the run directory; their manifest fields."""
        return {}

    # -- after the capture -------------------------------------------------------------------------
    def finish_run(self, name: str, trace: Trace, raw_dir: Path | None, *, first_call: bool = False) -> DeviceFacts:
        """(analysis worker, before the summary is published) Quick device facts: what the
        device wrote, problems with it, notes for the end of the summary."""
        return DeviceFacts()

    def enrich(self, name: str, raw_dir: Path | None, facts: DeviceFacts) -> DeviceFacts:
        """(output worker, after the summary is published) Slow enrichment — Neuron Explorer
        runs here — added to the run's facts and notes before it is written."""
        return DeviceFacts()

    def describe(self) -> dict[str, Any]:
        """Facts about the device for the run manifest."""
        return {"device": self.name}

    def device_limits(self) -> Any:
        """(calling thread, when a profile with shapes ends) The device's roofs for the roofline
        (an ``analysis.roofs.DeviceLimits``), or None: a device neuronscope has no figures for."""
        return None
