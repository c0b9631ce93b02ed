"""``ns.compare``: several implementations of one function timed, profiled, checked and explained
in one call.

    c = ns.compare({"naive": f, "rms_norm": g, "compiled": torch.compile(f)}, x, w)
    print(c)

For each variant, in this order:

1. **warm-up** until compilation is over: calls until no Dynamo frame was compiled in the last
   three and their times have settled; what the first calls took beyond a steady call is its
   compile time (Dynamo, Inductor, a Neuron NEFF: whatever the first call paid for);
2. its **output** checked against the first variant's (``torch.testing.assert_close``, the
   default tolerances of the dtypes, or ``rtol``/``atol``): a variant whose result differs is
   marked and never called faster;
3. **one profile** of ``steps`` calls, shapes recorded, each a step (``ns.step()``): an ordinary
   run, saved where every run is (``neuronscope diff`` works on any pair);
4. then all variants are **timed unprofiled**, after one untimed call of each (a profile
   leaves caches cold and memory to be faulted back in, which would bias whichever ran first),
   in rounds that give each a turn (the order rotates): one untimed call, then samples back to
   back for :data:`TURN_S` — a sample is a block of calls lasting :data:`BLOCK_S` at least, the
   device synchronised before and after it; until each median's confidence interval is within
   1 % of it or ``max_time_s`` is spent (at least 10 rounds). Samples are sized by the fastest
   warm-up call, and sized again (the rounds started over) if a sample runs under half of it:
   a warm-up under a burst of load must not leave one variant timed call by call and its twin
   in blocks of twelve.

Profiles come before the timing, each processed before the next starts, so the background
workers are idle while the variants are profiled and timed. Nothing here raises into the caller's code once the
arguments are validated: a variant that raises is marked failed and the others go on.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import _config, _stats
from .._run import Run
from ..analysis.roofs import DeviceLimits, size_text
from ..analysis.variants import Interval, StepWork, median_interval, roof_share, speedup
from ..errors import ConfigurationError
from ..report.comparison import Comparison, VariantResult
from .devices import DeviceBackend, select_backend, validate_device

__all__ = ["compare"]

#: rounds before the interval may stop the timing (and the fewest a 95 % interval needs, with room)
MIN_ROUNDS = 10
MAX_ROUNDS = 100_000
#: the timing stops once every median's interval is within this % of it
PRECISION_PCT = 1.0
#: a sample: back-to-back calls lasting this long at least (the timer's and a sync's cost vanish)
BLOCK_S = 0.002
MAX_INNER = 10_000
#: a variant is re-sized, its rounds started again, when a sample ran this many times faster than
#: the warm-up call it was sized by (at most MAX_RESIZES times, in the first MIN_ROUNDS rounds)
RESIZE_RATIO = 2.0
MAX_RESIZES = 4
#: a variant's turn in a round: one untimed call — the variant timed before it left the caches and
#: the allocator in its own state, which a compiled variant after an eager one paid 30 % for —
#: then samples back to back for this long at least, as a loop runs it; a burst of load hits a
#: few of them, not the median
TURN_S = 0.02
#: warm-up: at least this many calls; done when the last SETTLE compiled nothing and none of
#: them took more than SETTLED_RATIO times the median of the calls since the last compilation
MIN_WARMUP = 3
SETTLE = 3
SETTLED_RATIO = 2.0
MAX_WARMUP_CALLS = 30
#: how long compare waits for a profile's processing before going on anyway
PROFILE_WAIT_S = 300.0


@dataclass
class _Variant:
    """One variant while it is measured (mutable; the record is a VariantResult)."""

    name: str
    call: Callable[[], Any]
    error: str | None = None
    output: Any = None
    mismatch: str | None = None
    warmup_times: list[float] = field(default_factory=list)
    compiled_calls: list[int] = field(default_factory=list)  #: warm-up calls that compiled a Dynamo frame
    settled: bool = True
    steady_s: float = 0.0
    #: the fastest settled warm-up call: what a sample's calls and a turn's samples are sized by
    #: (load only adds time: beside two busy processes two identical variants, sized by the median
    #: of their last three warm-up calls, got samples of 1 call and of 12, which load then hit
    #: unequally: "6.01x slower"); lowered to a timed sample's per-call time by _sized_again
    fastest_s: float = 0.0
    inner: int = 1  #: calls a sample times
    per_turn: int = 1  #: samples a turn takes, back to back
    samples: list[float] = field(default_factory=list)
    #: calls of the rounds dropped when the samples were sized again (_sized_again): in no sample
    discarded_calls: int = 0
    run: Run | None = None


def compare(
    variants: Mapping[str, Callable[..., Any]],
    /,
    *args: Any,
    steps: int = 10,
    max_time_s: float = 5.0,
    work: Any = "io",
    device: str = "auto",
    output_dir: Any = None,
    profile: bool = True,
    check: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    confidence: float = 0.95,
    **kwargs: Any,
) -> Comparison:
    """Time, profile, check and explain implementations of one function; the first is the baseline.

    Each variant is called as ``variant(*args, **kwargs)``; give zero-argument callables and no
    arguments to compare whole steps (``{"eager": lambda: step(model), ...}``). The keyword
    names below are compare's own: an argument of the variants with one of those names goes
    through a lambda or ``functools.partial``.

    Args:
        variants: name -> callable, in the order of the table; the first is the baseline.
        steps: calls in each variant's profile (one ``ns.step()`` after each).
        max_time_s: the most the timing may take (all variants together; it stops sooner once
            every median is known to within 1 %); at least 10 rounds are timed regardless.
        work: the operation's own work per call, for its share of the roof: ``"io"`` (its tensor
            inputs read and its outputs written once, from their sizes), a dict with ``bytes``
            and/or ``flops`` (and ``dtype``, ``unit``: ``"matrix"``/``"vector"``), or None.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"neuron"``: whose ``synchronize()`` waits
            for the device around timed calls, and what the profiles record.
        output_dir: where the profiles' run directories go (default: as every run).
        profile: False times and checks only (no runs, no device time, no explanation).
        check: compare each output with the baseline's (False when outputs legitimately
            differ, e.g. random sampling or in-place updates).
        rtol: with ``atol``, the tolerances for the check (default: by dtype, as
            ``torch.testing.assert_close``).
        atol: see ``rtol``.
        confidence: of the medians' intervals (order statistics; 0.95 by default).
        **kwargs: passed to every variant.

    Returns:
        A :class:`~neuronscope.Comparison`: ``print`` it, show it in a notebook, ``to_pandas()``,
        ``to_dict()``, ``write_html(path)``.
    """
    backend, stated_work = _validated(variants, steps, max_time_s, work, device, profile, check, rtol, atol, confidence)
    states = [_Variant(v_name, _bound(fn, args, kwargs)) for v_name, fn in variants.items()]
    sync = _guarded_sync(backend)
    for v in states:
        _warm_up(v, sync, max_time_s)
    if check:
        _check_outputs(states, rtol, atol)
    if profile:
        _profile_all(states, steps, backend.name, output_dir)
    # inside an enclosing profile every timed call is recorded too: its times are the profiler's
    # as much as the variants', so the fewest rounds of one call are enough (and keep it small)
    profiled_timing = bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))
    rounds, timing_s = _time_all(states, sync, max_time_s, confidence, quick=profiled_timing)
    step_work = stated_work if stated_work is not None or work is None else _io_work(args, kwargs, _baseline_output(states))
    notes = _notes(states, profiled_timing)
    return _comparison(states, backend, step_work, confidence, rounds, timing_s, steps if profile else 0, notes)


def _validated(
    variants: Any,
    steps: Any,
    max_time_s: Any,
    work: Any,
    device: Any,
    profile: Any,
    check: Any,
    rtol: Any,
    atol: Any,
    confidence: Any,
) -> tuple[DeviceBackend, StepWork | None]:
    """Every argument checked before anything runs; a mistake is a ConfigurationError naming it."""
    if not isinstance(variants, Mapping) or not variants:
        raise ConfigurationError('compare(variants): pass a dict of name -> callable, e.g. {"naive": f, "fused": g}')
    for name, fn in variants.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"compare(variants): the name {name!r} must be a non-empty string")
        if not callable(fn):
            raise ConfigurationError(f"compare(variants): {name!r} is a {type(fn).__name__}, not a callable")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigurationError(f"compare(steps={steps!r}): use a positive int (calls per profile)")
    if not isinstance(max_time_s, (int, float)) or isinstance(max_time_s, bool) or not 0 < max_time_s < math.inf:
        raise ConfigurationError(f"compare(max_time_s={max_time_s!r}): use a positive number of seconds")
    for flag, value in (("profile", profile), ("check", check)):
        if not isinstance(value, bool):
            raise ConfigurationError(f"compare({flag}={value!r}): use True or False")
    if (rtol is None) != (atol is None):
        raise ConfigurationError("compare(rtol=..., atol=...): give both tolerances or neither (then: by dtype)")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and (not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 <= tol < math.inf):
            raise ConfigurationError(f"compare({name}={tol!r}): use a non-negative number")
    if not isinstance(confidence, float) or not 0.5 <= confidence < 1.0:
        raise ConfigurationError(f"compare(confidence={confidence!r}): use a probability in [0.5, 1), e.g. 0.95")
    backend = select_backend(validate_device(device))
    return backend, _stated_work(work)


def _stated_work(work: Any) -> StepWork | None:
    """``work=``: None or "io" (derived later from the tensors), a StepWork, or a dict of its fields."""
    if work is None or work == "io":
        return None
    if isinstance(work, StepWork):
        return work
    if isinstance(work, Mapping):
        unknown = set(work) - {"bytes", "flops", "dtype", "unit"}
        if unknown:
            raise ConfigurationError(f"compare(work=...): unknown keys {sorted(unknown)}; use bytes, flops, dtype, unit")
        return StepWork(**{**work, "source": "given (work=)"})
    raise ConfigurationError(f'compare(work={work!r}): use "io", None, or a dict such as {{"bytes": 33554432, "flops": 0}}')


def _bound(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    if not args and not kwargs:
        return fn
    return lambda: fn(*args, **kwargs)


def _guarded_sync(backend: DeviceBackend) -> Callable[[], None]:
    """The device's synchronize; a failing one is contained once and then skipped."""
    broken: list[bool] = []

    def sync() -> None:
        if broken:
            return
        try:
            backend.synchronize()
        except Exception as exc:  # noqa: BLE001 - an unsynchronised timing is noted, never a crash
            broken.append(True)
            _stats.contain("compare: device synchronize", exc, exc_info=False)

    return sync


def _compilations() -> int:
    """Dynamo's count of compiled frames (0 before torch.compile was first used)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    try:
        return int(sum(counters["frames"].values())) if counters is not None else 0
    except Exception:  # noqa: BLE001 - a changed torch internal: warm-up falls back to the timing alone
        return 0


def _warm_up(v: _Variant, sync: Callable[[], None], max_time_s: float) -> None:
    """Call until compilation is over and the call time has settled (module docstring)."""
    last_compile = -1
    out: Any = None
    try:
        while True:
            before = _compilations()
            t0 = time.perf_counter()
            out = v.call()
            sync()
            v.warmup_times.append(time.perf_counter() - t0)
            if _compilations() != before:
                last_compile = len(v.warmup_times) - 1
                v.compiled_calls.append(last_compile)
            tail = v.warmup_times[last_compile + 1 :]
            if len(v.warmup_times) >= MIN_WARMUP and len(tail) >= SETTLE and max(tail[-SETTLE:]) <= SETTLED_RATIO * _median(tail):
                break
            # past the budget (a fraction of the timing's) without settling: go on, noted
            if len(v.warmup_times) >= MAX_WARMUP_CALLS or (len(tail) >= SETTLE and sum(tail) > max(1.0, max_time_s / 2)):
                v.settled = False
                break
    except Exception as exc:  # noqa: BLE001 - the variant's own failure: marked, the others go on
        v.error = f"{type(exc).__name__}: {exc}"
        return
    tail = v.warmup_times[last_compile + 1 :] or v.warmup_times
    v.steady_s = _median(tail[-SETTLE:])
    v.fastest_s = min(tail)
    v.output = _detached(out)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _detached(out: Any) -> Any:
    """A copy of the output's tensors (a later call may reuse their memory: CUDA graphs)."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (list, tuple)):
        items = [_detached(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    if isinstance(out, dict):
        return {k: _detached(o) for k, o in out.items()}
    return out


def _check_outputs(states: list[_Variant], rtol: float | None, atol: float | None) -> None:
    """Each variant's output against the baseline's; a difference is kept as the variant's mismatch."""
    base = states[0]
    if base.error is not None:
        return
    for v in states[1:]:
        if v.error is not None:
            continue
        try:
            torch.testing.assert_close(v.output, base.output, rtol=rtol, atol=atol, check_dtype=False, equal_nan=True)
        except AssertionError as exc:
            v.mismatch = " ".join(str(exc).split())[:300]
        except Exception as exc:  # noqa: BLE001 - outputs of different kinds: not the same result
            v.mismatch = f"cannot be compared with {base.name}'s: {type(exc).__name__}: {exc}"[:300]


def _profile_all(states: list[_Variant], steps: int, device: str, output_dir: Any) -> None:
    """One profile per variant (shapes recorded), each processed before the next starts: the
    background workers must not take a core from the next profile, nor from the timing."""
    from .profile import profile_neuron
    from .steps import step

    for v in states:
        if v.error is not None:
            continue
        try:
            with profile_neuron(name=v.name, device=device, output_dir=output_dir, record_shapes=True) as run:
                for _ in range(steps):
                    v.call()
                    step()
            v.run = run
        except Exception as exc:  # noqa: BLE001 - it ran in the warm-up: a failure now is the variant's
            v.error = f"{type(exc).__name__}: {exc} (while profiled)"
            continue
        if run.profiled and run.parent is None:  # a run joined into a foreign profile ends with it
            run.wait(PROFILE_WAIT_S)


def _time_all(
    states: list[_Variant], sync: Callable[[], None], max_time_s: float, confidence: float, *, quick: bool = False
) -> tuple[int, float]:
    """Interleaved rounds of timed blocks until every interval is precise enough or the time is
    spent (module docstring); returns the rounds and the seconds taken. ``quick``: the fewest
    rounds, one call a block."""
    live = [v for v in states if v.error is None]
    if not live:
        return 0, 0.0
    for v in live:
        if quick:
            v.inner, v.per_turn = 1, 1
        else:
            _size(v)
    started = time.perf_counter()
    rounds = resizes = 0
    current = live[0]
    try:
        for current in live:
            current.call()  # untimed: after the profiles, caches are cold and freed memory is to be faulted back in
        sync()
        started = time.perf_counter()
        while rounds < MAX_ROUNDS:
            first = rounds % len(live)
            for current in live[first:] + live[:first]:  # no variant always runs first
                if len(live) > 1:
                    current.call()  # untimed: another variant ran last
                current.samples += [_timed_block(current, sync) for _ in range(current.per_turn)]
            rounds += 1
            if not quick and rounds < MIN_ROUNDS and resizes < MAX_RESIZES and _sized_again(live, rounds):
                resizes += 1  # the rounds so far timed samples of other sizes: start again
                rounds = 0
                continue
            if rounds >= MIN_ROUNDS:
                if quick or time.perf_counter() - started >= max_time_s:
                    break
                if all(median_interval(v.samples, confidence, v.per_turn).half_width_pct <= PRECISION_PCT for v in live):
                    break
    except Exception as exc:  # noqa: BLE001 - a variant that fails only now: marked, the whole rounds so far kept
        current.error = f"{type(exc).__name__}: {exc} (while timed)"
        for v in live:
            v.samples = v.samples[: rounds * v.per_turn]
    return rounds, time.perf_counter() - started


def _size(v: _Variant) -> None:
    """Calls a sample and samples a turn, from the fastest call seen (the module docstring's sizes)."""
    call_s = v.fastest_s
    v.inner = max(1, min(MAX_INNER, math.ceil(BLOCK_S / call_s))) if call_s > 0 else MAX_INNER
    v.per_turn = max(1, round(TURN_S / (v.inner * call_s))) if call_s > 0 else 1


def _sized_again(live: list[_Variant], rounds: int) -> bool:
    """Sizes again each variant whose samples ran under half its fastest warm-up call, the
    ``rounds`` so far dropped (their calls counted in ``discarded_calls``): load only adds time,
    and a warm-up wholly under a burst of it (three calls of 13 ms or more for a 170 us one, on
    CI beside the other test process) sized its samples at 1 call where its twin's were 12,
    which load then hit unequally ("1.57x slower" for identical functions). True if any was."""
    faster = {v.name: s for v in live if v.samples and (s := min(v.samples)) < v.fastest_s / RESIZE_RATIO}
    if not faster:
        return False
    for v in live:
        v.discarded_calls += len(v.samples) * v.inner + (rounds if len(live) > 1 else 0)
        v.samples.clear()
        if v.name in faster:
            v.fastest_s = faster[v.name]
            _size(v)
    return True


def _timed_block(v: _Variant, sync: Callable[[], None]) -> float:
    """Seconds per call over ``v.inner`` back-to-back calls, the device synchronised around them."""
    call, n = v.call, v.inner
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    sync()
    return (time.perf_counter() - t0) / n


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


_DTYPE_CLASS = {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _dtype_class(dtype: torch.dtype) -> str:
    if dtype in _DTYPE_CLASS:
        return _DTYPE_CLASS[dtype]
    if "float8" in str(dtype):
        return "fp8"
    return "int8" if dtype in (torch.int8, torch.uint8) else "int"


def _io_work(args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> StepWork | None:
    """The least a call must move: its tensor inputs read once and its outputs written once
    (None without tensor inputs: a zero-argument step says nothing about its data)."""
    inputs = list({id(t): t for t in _tensors(list(args) + list(kwargs.values()))}.values())  # each tensor once
    if not inputs:
        return None
    outputs = _tensors(output)
    read = sum(t.numel() * t.element_size() for t in inputs)
    written = sum(t.numel() * t.element_size() for t in outputs)
    largest = max(inputs + outputs, key=lambda t: t.numel() * t.element_size())
    return StepWork(
        bytes=float(read + written),
        dtype=_dtype_class(largest.dtype),
        source=f"inputs read and outputs written once: {size_text(read) or f'{read} B'} + {size_text(written) or f'{written} B'}",
    )


def _baseline_output(states: list[_Variant]) -> Any:
    return states[0].output if states[0].error is None else None


def _notes(states: list[_Variant], profiled_timing: bool) -> list[str]:
    notes = []
    if profiled_timing:
        notes.append(
            f"a profiler was running while the variants were timed (an enclosing profile): the times include its cost, "
            f"and only {MIN_ROUNDS} rounds of one call each were timed"
        )
    discarded = {v.name: v.discarded_calls for v in states if v.discarded_calls}
    if discarded:
        notes.append(
            "samples sized again after the first rounds (a sample ran under half the fastest warm-up call: load during "
            "the warm-up); those rounds were dropped: " + ", ".join(f"{name} {n} calls" for name, n in discarded.items())
        )
    for v in states:
        if v.error is None and not v.settled:
            notes.append(
                f"{v.name}: its warm-up calls did not settle ({len(v.warmup_times)} calls, the last ones more than "
                f"{SETTLED_RATIO:g}x their median apart): a noisy machine, or a variant that recompiles"
            )
    return notes


def _limits(states: list[_Variant], backend: DeviceBackend) -> DeviceLimits | None:
    """The roofs: those the profiles were measured against, else configured, else the device's."""
    for v in states:
        summary = v.run.summary if v.run is not None else None
        if summary is not None and summary.limits is not None:
            return summary.limits
    configured = _config.current().device_limits
    if configured is not None:
        return configured  # type: ignore[no-any-return]
    try:
        return backend.device_limits()  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - no roofs is a missing column, never a failed comparison
        _stats.contain("compare: device limits", exc, exc_info=False)
        return None


def _comparison(
    states: list[_Variant],
    backend: DeviceBackend,
    work: StepWork | None,
    confidence: float,
    rounds: int,
    timing_s: float,
    steps: int,
    notes: list[str],
) -> Comparison:
    limits = _limits(states, backend) if work is not None else None
    intervals = {v.name: median_interval(v.samples, confidence, v.per_turn) for v in states if v.error is None and v.samples}
    base = states[0]
    results = [_result(v, base, intervals, work, limits, steps) for v in states]
    return Comparison(
        variants=tuple(results),
        baseline=base.name,
        device=backend.name,
        confidence=confidence,
        rounds=rounds,
        timing_s=timing_s,
        steps=steps,
        work=work,
        limits=limits,
        notes=tuple(notes),
    )


def _result(
    v: _Variant, base: _Variant, intervals: dict[str, Interval], work: StepWork | None, limits: DeviceLimits | None, steps: int
) -> VariantResult:
    step = intervals.get(v.name)
    base_step = intervals.get(base.name)
    ratio = speedup(base_step, step) if step is not None and base_step is not None and v is not base else None
    explanation, removed, added = (
        _explain(base.run, v.run) if v is not base and v.run is not None and base.run is not None else (None, (), ())
    )
    first = v.warmup_times[0] if v.warmup_times else 0.0
    compile_calls = sorted({0, *v.compiled_calls}) if v.warmup_times else []
    return VariantResult(
        name=v.name,
        baseline=v is base,
        step=step,
        samples=tuple(v.samples),
        calls_per_sample=v.inner,
        samples_per_round=v.per_turn,
        discarded_calls=v.discarded_calls,
        speedup=ratio,
        error=v.error,
        mismatch=v.mismatch,
        warmup_calls=len(v.warmup_times),
        first_call_s=first,
        compile_s=sum(max(0.0, v.warmup_times[i] - v.steady_s) for i in compile_calls),
        compiled=bool(v.compiled_calls),
        # a wrong result did not do the operation's work: its time against that work means nothing
        roof=roof_share(work, limits, step.median)
        if work is not None and limits is not None and step is not None and v.mismatch is None
        else None,
        run=v.run if v.run is not None and v.run.profiled else None,
        steps=steps,
        explanation=explanation,
        ops_removed=removed,
        ops_added=added,
    )


def _explain(base: Run | None, run: Run | None) -> tuple[Any, tuple[str, ...], tuple[str, ...]]:
    """Where the step time went from the baseline's profile to this one's, per step (as
    ``neuronscope diff`` explains it), and the ops only one of them ran."""
    from ..analysis.diff import Normalisation, diff_summaries
    from ..analysis.explain import explain_diff
    from ..report.sources import as_source, run_extent

    try:
        if base is None or run is None or base.summary is None or run.summary is None:
            return None, (), ()
        a, b = as_source(base), as_source(run)
        if a.diagnosis is None or b.diagnosis is None:
            return None, (), ()
        ea, eb = run_extent(a), run_extent(b)
        per_step = ea is not None and eb is not None and ea.steps_recorded > 0 and eb.steps_recorded > 0
        n = Normalisation("per_step", ea, eb, why=("one profile of each",)) if per_step else Normalisation()
        d = diff_summaries(a.summary, b.summary, normalised=n)
        why = explain_diff(a.summary, b.summary, a.diagnosis, b.diagnosis, normalised=n)
        return why, tuple(d.label(x) for x in d.only_in_a), tuple(d.label(x) for x in d.only_in_b)
    except Exception as exc:  # noqa: BLE001 - no explanation is a missing line, never a failed comparison
        _stats.contain("compare: explanation", exc, exc_info=False)
        return None, (), ()
