"""Synthetic traces with exact timing, for the diagnosis tests (times in microseconds).

    b = TraceBuilder(device="cuda")
    op = b.op("aten::mul", 0, 10)             # a CPU op on the main thread
    b.launch(op, 2, 5, kernel_at=20, kernel_us=30)   # its runtime call and the kernel it launched
    trace = b.build()
"""

from __future__ import annotations

from neuronscope.trace.kinds import MARKER_CAPTURE, MARKER_CAPTURE_END, EventKind
from neuronscope.trace.model import Trace

US = 1000
BASE = 1_700_000_000_000_000_000


class TraceBuilder:
    def __init__(self, device: str = "cuda") -> None:
        self.device = device
        self.rows: list[tuple] = []
        self.inputs: dict[int, tuple[list, list]] = {}
        self._corr = 100
        self._runtime_corr = 1_000_000  # CUPTI's correlation ids: a sequence of their own

    def _add(self, kind, name, start_us, dur_us, thread=0, corr=0, linked=0, cat="") -> int:
        # BASE + float would round to 256 ns at 1.7e18: add the integer ns to the integer base
        self.rows.append((int(kind), name, BASE + int(round(start_us * US)), int(round(dur_us * US)), thread, corr, linked, cat))
        return len(self.rows) - 1

    def op(self, name: str, start_us: float, dur_us: float, thread: int = 0, *, inputs=None) -> int:
        self._corr += 1
        i = self._add(EventKind.OP, name, start_us, dur_us, thread, corr=self._corr, cat="cpu_op")
        if inputs is not None:
            self.inputs[i] = inputs
        return i

    def region(self, name: str, start_us: float, dur_us: float, thread: int = 0) -> int:
        return self._add(EventKind.REGION, name, start_us, dur_us, thread, cat="user_annotation")

    def python(self, frame: str, start_us: float, dur_us: float, thread: int = 0) -> int:
        return self._add(EventKind.PYTHON, frame, start_us, dur_us, thread, cat="python_function")

    def runtime(self, name: str, start_us: float, dur_us: float, op: int | None = None, thread: int = 0) -> int:
        """A runtime call with a correlation id of its own (as CUPTI gives); ``linked`` is the
        External id of ``op``."""
        linked = self.rows[op][5] if op is not None else 0
        self._runtime_corr += 1
        return self._add(EventKind.RUNTIME, name, start_us, dur_us, thread, corr=self._runtime_corr, linked=linked, cat="cuda_runtime")

    def kernel(self, name: str, start_us: float, dur_us: float, op: int | None = None, stream: int = -8, *, call: int | None = None, cat: str = "kernel") -> int:
        """Device work; ``call`` is the runtime call that launched it (its correlation id), else
        it links to ``op`` through the External id alone."""
        linked = self.rows[op][5] if op is not None else 0
        corr = self.rows[call][5] if call is not None else 0
        return self._add(EventKind.DEVICE, name, start_us, dur_us, stream, corr=corr, linked=linked, cat=cat)

    def launch(self, op: int | None, rt_start: float, rt_us: float, *, kernel_at: float, kernel_us: float, name: str = "k",
               call: str = "cudaLaunchKernel", stream: int = -8, thread: int = 0) -> int:
        rt = self.runtime(call, rt_start, rt_us, op, thread=thread)
        return self.kernel(name, kernel_at, kernel_us, op, stream, call=rt)

    def marker(self, name: str, at_us: float, thread: int = 0) -> int:
        return self._add(EventKind.OTHER, name, at_us, 0, thread, cat="user_annotation")

    def window(self, start_us: float, end_us: float, serial: int = 1, name: str = "run") -> None:
        self.marker(f"{MARKER_CAPTURE}#{serial}:{name}", start_us)
        self.marker(f"{MARKER_CAPTURE_END}#{serial}:{name}", end_us)

    def build(self) -> Trace:
        kind, names, start, dur, thread, corr, linked, cats = (list(c) for c in zip(*self.rows))
        return Trace.from_columns(
            names=names, kind=kind, start_ns=start, duration_ns=dur, thread=thread,
            correlation_id=corr, linked_correlation_id=linked, device=self.device,
            base_time_ns=BASE, categories=cats, inputs=dict(self.inputs),
        )
