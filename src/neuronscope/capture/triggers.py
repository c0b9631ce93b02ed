"""``trigger=ns.SlowCalls(...)``: profile the calls like the slow one, and say why they are slower.

A device profile cannot be taken after the fact, so when a call turns out slower than the
tail quantile (or an SLO), the trigger *arms* the next ``capture`` calls — only those with
the same ``key(*args, **kwargs)`` when a key is given (an input-size bucket, a route...) —
and compares each with a **baseline**: a normal call (at or under the median) it profiles
now and then. The comparison is the wall-time explanation ``neuronscope diff`` prints.

Cost on the calling thread (bench/bench_trigger_overhead.py): every call is timed with two
``perf_counter_ns`` and counted into a fixed log-scale histogram (8 buckets per octave, ~9 %
wide; counts halved every few thousand calls so it follows drift); the quantile is re-read
from the histogram every 16 calls until ``min_calls`` were seen (the threshold then exists
within 16 calls of them), then each time the calls timed grew by an eighth, up to every 1024
calls (a p99 of 200 calls is their second-slowest: held for 1,024 calls, it fires on anywhere
from 0.2 to 2.5 % of them), off the per-call path. The per-call check is one
comparison with the cached threshold and one flag. Once ``max_per_hour`` is used up the
threshold is lifted until a firing is an hour old, so slow calls then cost nothing either.
The quantile's threshold is at least ``MIN_EXCESS_NS`` (20 us) over the median: a tight loop's
p99 is within a bucket of its median, where a call moves with what ran before it on the core.

Calls that overlap neuronscope's background workers (processing a profile) are timed without
the workers' footprint: that work competes for the GIL, the cores and the caches, and the
trigger must not fire on it — nor go blind while it runs, which in a tight loop is most of the
time. Such a call is timed by what its own thread ran: its thread's CPU time, less the garbage
collections that ran on it (a collection runs in whichever thread allocates when the count is
reached, so the objects the workers make are often collected on the caller's thread: gen-2
collections of ~100 ms were measured there, in a loop of 12 µs calls). The GIL waits and the
workers' disk writes that hold the GIL are not in there. What remains — the cores and caches
the workers share, intra-op threads that spin — still makes such calls slower, so they have
their own histogram and threshold (the same quantile, once ``min_calls`` of them were timed;
until then twice the ordinary threshold, ``OVERLAP_MARGIN``): calls that overlapped our work
are compared with calls that overlapped our work. A call blocked on the device (a sync) is
timed by its CPU time alone while the workers run: its device wait can then not fire it (an async
call: its steps' CPU time, capture/timed.py's ``_OwnTime``). A call during which the workers
started is skipped (one per profile), and so are the first calls after a profiled one, which
pay the profiler's teardown (capture/timed.py's ``SETTLING_CALLS``), and the first calls after
the workers finish, which run in the caches the workers just used (``AFTER_WORKERS_CALLS``).

Other processes holding the cores (a loaded machine, read from the calling thread's run-queue
wait over at least 20 ms; the calls timed by wall before the first reading said so are dropped)
are the same problem from outside: a
call is then timed by its own CPU time -- and one past the threshold by its wall time, by that
wall time less its thread's waits for a core if that is more, unless a thread of the process lost
its core meanwhile (the call may have waited on it): a call that waits on I/O, a lock or the
device is slow by that wait (timed by its CPU time alone, a 30 ms sleep behind an SLO of 15 ms
never fired beside two CPU burners) -- and compared with the calls that overlapped the workers
when a thread of the process lost its core meanwhile (``getrusage``'s involuntary switches) --
an intra-op thread preempted in a parallel region leaves the calling thread spinning at the
barrier, on its own CPU time (12 us calls beside two CPU burners: p99 of their CPU time 8 ms; of
the calls not preempted, 10 us); such a call that also overlapped the workers is not timed. (Not
dropping them all: a call longer than a time slice is nearly always preempted on a loaded
machine, and the slow calls would then never fire.) An ``async def`` call is timed so step by
step, its awaits by their wall time less the loop thread's waits for a core (capture/timed.py).

Not told apart (a known limit): an intra-op thread that was woken for a parallel region and
waits for a core is not preempted, so a call whose thread spins at the barrier for it looks like
a call that ran that long -- beside two CPU burners on two cores, a 12 us call spun 7.5 ms while
its pool thread waited 8 ms. Its pool thread's waits cannot tell it from a slow call that the pool
shares (40 products of 320x256 matrices: the pool waited ~8 ms of its 8.4 ms too), so such calls
fire as slow ones do: more intra-op threads than free cores is the machine's state to fix
(``torch.set_num_threads``), and a profile of such a call shows the spin.

Until a histogram holds ``min_calls`` calls of its own, its threshold is read from both: in a
tight loop most calls overlap the workers, and a threshold that waited for its own calls would
come after the first slow calls and hold them.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING, Any


from .. import _stats
from ..errors import ConfigurationError
from .._trigger import Trigger, key_for_manifest
from ..result import Analysis, Annotation

if TYPE_CHECKING:
    from .._run import Run

__all__ = ["CONTENDED_WAIT_SHARE", "REFRESH_MASK", "REFRESH_MASK_SETTLED", "SlowCalls", "TriggerState"]

log = logging.getLogger("neuronscope")

_BUCKETS = 64 * 8 + 8
REFRESH_MASK = 15  # re-read the quantile every 16 timed calls until min_calls were timed
REFRESH_MASK_SETTLED = 1023  # ... and every 1024 once min_calls were timed
#: normal calls profiled per baseline round; the fastest becomes the baseline (a profiled call
#: also carries the profiler's own overhead, and another thread may have slowed any one of them)
BASELINE_CANDIDATES = 3
BASELINE_REFRESH_S = 900.0  # a baseline older than this is replaced by a fresher one
MAX_BASELINE_ATTEMPTS_PER_HOUR = 12
#: armed captures of a trigger not filled within this time are dropped (the key never came back)
CAPTURE_WINDOW_S = 600.0
#: until the calls that overlapped neuronscope's workers have their own threshold (min_calls of
#: them), they fire past this multiple of the ordinary one (module doc)
OVERLAP_MARGIN = 2.0
#: a calling thread that waited for a core this share of the time since the last refresh is
#: contended: its calls are timed by their own CPU time until a refresh says otherwise
CONTENDED_WAIT_SHARE = 0.05
#: a call fires on the quantile only when it is also this much slower than the median: the p99
#: of a tight loop of microsecond calls sits within a bucket of their median, where a call's
#: time moves with what ran before it on the core (a 3 us call, measured: 5-15 % slower after
#: 300 us of other work, even a Python spin; 0.1 % of calls 13-15 us slower on interrupts), and
#: a profile, whose recording adds ~1.6 us per op, could not show such an excess anyway
MIN_EXCESS_NS = 20_000


class SlowCalls:
    """Tail-triggered capture for ``@profile_neuron(trigger=ns.SlowCalls(...))``.

    Every call is timed. After ``min_calls`` calls, a call slower than the ``quantile`` of
    recent calls and ``MIN_EXCESS_NS`` (20 us) over their median (or slower than ``slo_ms``
    when given) fires the trigger: the next ``capture``
    calls are profiled — only calls whose ``key(*args, **kwargs)`` equals the slow call's,
    when ``key`` is given. At most ``max_per_hour`` firings per rolling hour (the rest are
    counted in ``ns.stats()["triggers_suppressed"]``). A normal call is profiled now and then
    as the baseline; each triggered run has ``run.trigger``, ``run.baseline`` and
    ``run.explanation``.
    """

    def __init__(
        self,
        quantile: float = 0.99,
        slo_ms: float | None = None,
        min_calls: int = 200,
        capture: int = 3,
        max_per_hour: int = 6,
        key: Callable[..., Any] | None = None,
    ) -> None:
        if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0.5 <= quantile < 1:
            raise ConfigurationError(f"SlowCalls(quantile={quantile!r}): use a fraction from 0.5 to below 1, e.g. 0.99")
        if slo_ms is not None and (
            isinstance(slo_ms, bool) or not isinstance(slo_ms, (int, float)) or not math.isfinite(slo_ms) or slo_ms <= 0
        ):
            raise ConfigurationError(f"SlowCalls(slo_ms={slo_ms!r}): use a positive number of milliseconds or None")
        for arg, value, low in (("min_calls", min_calls, 10), ("capture", capture, 1), ("max_per_hour", max_per_hour, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"SlowCalls({arg}={value!r}): use an int >= {low}")
        if key is not None and not callable(key):
            raise ConfigurationError(
                "SlowCalls(key=...): pass a callable taking the call's arguments, e.g. lambda x: x.shape[0] > 512"
            )
        self.quantile = float(quantile)
        self.slo_ms = None if slo_ms is None else float(slo_ms)
        self.min_calls = min_calls
        self.capture = capture
        self.max_per_hour = max_per_hour
        self.key = key

    def threshold_label(self) -> str:
        return "SLO" if self.slo_ms is not None else f"p{self.quantile * 100:g}"

    def __repr__(self) -> str:
        opts = f"quantile={self.quantile}" if self.slo_ms is None else f"slo_ms={self.slo_ms}"
        key = ", key=..." if self.key is not None else ""
        return f"SlowCalls({opts}, min_calls={self.min_calls}, capture={self.capture}, max_per_hour={self.max_per_hour}{key})"


def _bucket_upper_ns(index: int) -> int:
    b, sub = index >> 3, index & 7
    return (9 + sub) << (b - 4)


def _edge_ns(cum: list[int], quantile: float) -> int:
    """The upper edge of the bucket holding ``quantile`` of a histogram's running counts."""
    return _bucket_upper_ns(min(bisect.bisect_left(cum, cum[-1] * quantile), _BUCKETS - 1))


def _quantile_or_floor(cum: list[int], quantile: float, median_ns: int) -> tuple[int, bool]:
    """The threshold read from a histogram's running counts: the quantile's bucket edge, or
    ``MIN_EXCESS_NS`` over the median when that is higher (a tight distribution's p99) -- and
    whether the floor held it."""
    edge = _edge_ns(cum, quantile)
    floor = median_ns + MIN_EXCESS_NS
    return max(edge, floor), floor > edge


def _ms_text(ms: float) -> str:
    """A duration for a reason line: ``41.2``, ``0.20``, ``0.0046`` (ms; two significant digits
    under a millisecond, where ``.1f`` said "took 0.0 ms > p99 0.0 ms")."""
    if ms >= 1 or ms <= 0:
        return f"{ms:.1f}"
    return f"{ms:.{min(9, 1 - math.floor(math.log10(ms)))}f}"


class _Pending:
    __slots__ = ("baseline", "deadline", "key", "remaining", "trigger")

    def __init__(self, trigger: Trigger, key: Any, remaining: int, baseline: Run | None) -> None:
        self.trigger = trigger
        self.key = key
        self.remaining = remaining
        self.deadline = time.monotonic() + CAPTURE_WINDOW_S
        self.baseline = baseline


class TriggerState:
    """One decorated function's trigger: the latency sketch, what is armed, the baseline."""

    def __init__(self, spec: SlowCalls, policy_calls: Any) -> None:
        self.spec = spec
        self.counts = [0] * _BUCKETS
        self.timed = itertools.count(1)
        self.policy_calls = policy_calls  # the policy's call counter: "call N" in reasons
        #: the threshold (ns) a call must exceed to fire; infinite until min_calls were timed
        self.threshold = [math.inf]
        #: calls that overlapped the workers: their own histogram and threshold (module doc)
        self.busy_counts = [0] * _BUCKETS
        self.busy_threshold = [math.inf]
        self.busy_total = 0
        #: whether MIN_EXCESS_NS over the median, not the quantile, set (threshold, busy_threshold)
        self.floored = [False, False]
        self.median_ns = 0
        #: True while a call must look at the trigger (captures armed, a baseline wanted)
        self.want = [False]
        self.lock = threading.Lock()
        self.pending: _Pending | None = None
        self.fired: deque[float] = deque()
        self.baseline: Run | None = None
        self.baseline_at = 0.0
        self.baseline_call_ns = math.inf  # the profiled call time of the current round's best candidate
        self.baseline_attempts: deque[float] = deque()
        self.baseline_next_call = 0  # a baseline attempt may be made from this timed call on
        self.baseline_wanted = False
        self.candidates_left = 0
        self.total = 0
        self.decay_at = max(2000, 10 * spec.min_calls)
        self.muted_until = 0.0  # max_per_hour reached: no threshold until a firing is an hour old

    # -- the sketch ---------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read median and thresholds from the histograms (module doc: how often)."""
        try:
            self._refresh()
        finally:
            self._refresh_overlapped()  # after the ordinary threshold: it may derive from it

    def _refresh(self) -> None:
        counts = self.counts
        total = sum(counts)
        if total >= self.decay_at:  # forget old calls slowly: follow drift, stay bounded
            self.counts[:] = [c >> 1 for c in counts]
        self.total = total
        if total < self.spec.min_calls:
            # Too few calls of its own -- in a tight loop most calls overlap the workers that
            # process the baselines -- so, until it has them, the quantile of every timed call:
            # else no threshold exists when the first slow calls come, and the histogram that
            # reaches min_calls later holds them, which puts the threshold above them.
            counts = [a + b for a, b in zip(counts, self.busy_counts)]
        cum = list(accumulate(counts))
        total = cum[-1]
        if total < self.spec.min_calls // 2:
            return
        # The median settles long before the tail: the baseline is taken from half of
        # min_calls on, so it exists by the time the trigger can fire.
        self.median_ns = _edge_ns(cum, 0.5)
        if total >= self.spec.min_calls and time.monotonic() >= self.muted_until:
            if self.spec.slo_ms is not None:
                self.threshold[0] = self.spec.slo_ms * 1e6
            else:
                self.threshold[0], self.floored[0] = _quantile_or_floor(cum, self.spec.quantile, self.median_ns)
        now = time.monotonic()
        if not self.candidates_left and (self.baseline is None or now - self.baseline_at > BASELINE_REFRESH_S):
            with self.lock:  # a new round of baseline candidates
                self.candidates_left = BASELINE_CANDIDATES
                self.baseline_call_ns = math.inf
                self.baseline_wanted = True
                self.want[0] = True

    def _refresh_overlapped(self) -> None:
        """The threshold of calls that overlapped the workers, from their own histogram (their
        CPU time: module doc); until it has ``min_calls``, the ordinary one times OVERLAP_MARGIN."""
        cum = list(accumulate(self.busy_counts))
        total = self.busy_total = cum[-1]
        if total >= self.decay_at:
            self.busy_counts[:] = [c >> 1 for c in self.busy_counts]
        if time.monotonic() < self.muted_until:
            self.busy_threshold[0] = math.inf
        elif self.spec.slo_ms is not None:
            self.busy_threshold[0] = self.spec.slo_ms * 1e6
        elif total >= self.spec.min_calls:
            self.busy_threshold[0], self.floored[1] = _quantile_or_floor(cum, self.spec.quantile, _edge_ns(cum, 0.5))
        else:
            self.busy_threshold[0], self.floored[1] = self.threshold[0] * OVERLAP_MARGIN, False

    # -- a slow call fires ----------------------------------------------------------------------
    def slow(self, dt_ns: int, args: Any, kwargs: Any, threshold_ns: float | None = None) -> None:
        """A timed call took ``dt_ns`` > threshold: arm the next calls like it (rate-limited)."""
        try:
            spec = self.spec
            now = time.monotonic()
            with self.lock:
                if self.pending is not None and now < self.pending.deadline:
                    return  # already capturing calls like the last slow one
                while self.fired and now - self.fired[0] >= 3600.0:
                    self.fired.popleft()
                if len(self.fired) >= spec.max_per_hour:
                    suppressed = True
                    # mute until the oldest firing is an hour old: slow calls cost nothing meanwhile
                    self.muted_until = self.fired[0] + 3600.0
                    self.threshold[0] = self.busy_threshold[0] = math.inf
                else:
                    suppressed = False
                    self.fired.append(now)
            if suppressed:
                _stats.record("triggers_suppressed")
                return
            key = None
            if spec.key is not None:
                key = spec.key(*args, **kwargs)
            from .sampling import count_value

            n = count_value(self.policy_calls)
            call_ms, thr_ms = dt_ns / 1e6, (self.threshold[0] if threshold_ns is None else threshold_ns) / 1e6
            what = f" (key {key_for_manifest(key)!r})" if spec.key is not None else ""
            label = spec.threshold_label()
            if spec.slo_ms is None and self.floored[threshold_ns is not None and threshold_ns != self.threshold[0]]:
                label = f"median + {_ms_text(MIN_EXCESS_NS / 1e6)} ms ="  # the floor, not the quantile, held it
            trigger = Trigger(
                kind="slow",
                reason=f"call {n} took {_ms_text(call_ms)} ms > {label} {_ms_text(thr_ms)} ms{what}",
                call_ms=round(call_ms, 3),
                threshold_ms=round(thr_ms, 3),
                key=key,
                span_context=_current_span_context(),
            )
            with self.lock:
                self.pending = _Pending(trigger, key, spec.capture, self.baseline)
                self.want[0] = True
            _stats.record("triggers_fired")
            log.info("neuronscope: trigger fired: %s; profiling the next %d call(s) like it", trigger.reason, spec.capture)
        except Exception as exc:  # noqa: BLE001 - the trigger never breaks the call it times
            _stats.contain("the SlowCalls trigger on a slow call", exc, once=True)

    # -- a call asks whether to profile itself ---------------------------------------------------
    def claim(self, args: Any, kwargs: Any, enabled: Callable[[], bool]) -> tuple[str, Any] | None:
        """("slow", pending) when this call is one to capture, ("baseline", None) when it is a
        baseline candidate, else None."""
        if not enabled():
            return None
        try:
            now = time.monotonic()
            key = None
            pending = self.pending
            if pending is not None and self.spec.key is not None and now < pending.deadline:
                key = self.spec.key(*args, **kwargs)  # only while a capture is armed
            with self.lock:
                pending = self.pending
                if pending is not None and now >= pending.deadline:
                    _stats.record("trigger_captures_expired", pending.remaining)
                    self.pending = pending = None
                if pending is not None and (self.spec.key is None or key == pending.key):
                    pending.remaining -= 1
                    if pending.remaining <= 0:
                        self.pending = None
                    self._update_want()
                    return "slow", pending
                if self.baseline_wanted and self.median_ns and self._baseline_attempt_allowed(now):
                    self.baseline_wanted = False  # one attempt in flight; baseline_done decides
                    self._update_want()
                    return "baseline", None
                self._update_want()
        except Exception as exc:  # noqa: BLE001 - the trigger never breaks the call it times
            _stats.contain("the SlowCalls trigger deciding a call", exc, once=True)
        return None

    def _baseline_attempt_allowed(self, now: float) -> bool:
        from .sampling import count_value

        if count_value(self.timed) < self.baseline_next_call:
            return False
        while self.baseline_attempts and now - self.baseline_attempts[0] >= 3600.0:
            self.baseline_attempts.popleft()
        if len(self.baseline_attempts) >= MAX_BASELINE_ATTEMPTS_PER_HOUR:
            return False
        self.baseline_attempts.append(now)
        return True

    def _update_want(self) -> None:
        self.want[0] = self.pending is not None or self.baseline_wanted

    def give_back(self, pending: _Pending) -> None:
        """A claimed capture could not be profiled (another profile held the profiler)."""
        with self.lock:
            pending.remaining += 1
            if self.pending is None and time.monotonic() < pending.deadline:
                self.pending = pending
            self._update_want()

    def baseline_done(self, run: Run, call_ns: int) -> None:
        """A baseline candidate finished: the fastest of the round is the baseline."""
        from .sampling import count_value

        with self.lock:
            if run.profiled:
                self.candidates_left -= 1
                if call_ns < self.baseline_call_ns:
                    self.baseline = run
                    self.baseline_call_ns = call_ns
                    self.baseline_at = time.monotonic()
            self.baseline_wanted = self.candidates_left > 0
            # spread the candidates over the traffic (a round ends before min_calls is reached)
            self.baseline_next_call = count_value(self.timed) + max(5, self.spec.min_calls // 8)
            self._update_want()

    # -- on the output worker ---------------------------------------------------------------------
    def annotate_triggered(self, at_fire: Run | None) -> Callable[[Analysis], Annotation]:
        def annotate(analysis: Analysis) -> Annotation:
            # the baseline the trigger had when it fired; else one taken since, once analysed
            baseline = at_fire if at_fire is not None else self.baseline
            before = baseline.analysis_if_ready() if baseline is not None else None
            if before is None or before is analysis:
                return Annotation()
            if before.summary is None or before.diagnosis is None or analysis.summary is None or analysis.diagnosis is None:
                return Annotation()
            from ..analysis.explain import explain_diff

            explanation = explain_diff(before.summary, analysis.summary, before.diagnosis, analysis.diagnosis)
            path = baseline.path if baseline is not None and baseline.done else None
            return Annotation(
                manifest={"baseline": str(path) if path is not None else None, "explanation": explanation.to_dict()},
                baseline=path,
                explanation=explanation,
            )

        return annotate

    @staticmethod
    def annotate_baseline(capture: Any) -> Callable[[Analysis], Annotation]:
        def annotate(analysis: Analysis) -> Annotation:
            call_ns = capture.call_ns
            return Annotation(
                manifest={"trigger_role": "baseline", "call_ms": None if call_ns is None else round(call_ns / 1e6, 3)}
            )

        return annotate


def _current_span_context() -> Any:
    """The OpenTelemetry span current as the slow call ended (its request span), if any."""
    try:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        return ctx if ctx.is_valid else None
    except Exception:  # noqa: BLE001 - no OpenTelemetry: no link
        return None
