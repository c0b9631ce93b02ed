"""The interface every device backend implements."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from torch.profiler import ProfilerActivity

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

    def finish_run(self, run: Any, raw_dir: Path | None, *, first_call: bool = False) -> list[str]:
        """After processing (background worker): add device facts to ``run.manifest`` and
        ``run.warnings``; return notes for the end of the summary table."""
        return []

    def describe(self) -> dict[str, Any]:
        """Facts about the device for the run manifest."""
        return {"device": self.name}
