"""Disk trouble and hostile files: an unwritable or full output dir, retention under load,
corrupt/truncated/empty/huge-line traces, and a bounded fuzz of the trace parser."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workloads import rmsnorm_naive

import neuronscope as ns
from neuronscope.trace.chrome import parse_trace_bytes

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KiB tmpfs when this machine lets us mount one; else a writer that fails with ENOSPC."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode == 0:
        (mount / "filler").write_bytes(b"\0" * (256 * 1024 - 4096 * 4))
        try:
            yield mount, "tmpfs"
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        return
    from neuronscope.sinks import rundir

    real = rundir.write_json

    def no_space(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    rundir.write_json = no_space
    from neuronscope.sinks import run_format

    run_format.write_json = no_space  # manifest.json and summary.json (the run directory's format)
    try:
        yield mount, "patched write"
    finally:
        rundir.write_json = real
        run_format.write_json = real


def test_disk_full_warns_and_every_call_succeeds(full_disk, xw, caplog):
    out, how = full_disk
    x, w = xw

    @ns.profile_neuron(name="full", output_dir=out, save_trace=True)
    def infer(a):
        return rmsnorm_naive(a, w)

    results = [infer(x) for _ in range(5)]
    ns.flush(30)
    assert all(r.shape == x.shape for r in results)
    run = ns.last_run()
    print(f"disk full simulated by {how}: {len(results)} calls ok, warnings {run.warnings}")
    assert run.summary["aten::rsqrt"].calls == 1  # nothing the user computed, or the summary, is lost
    assert any("could not write the run directory" in w or "No space" in w for w in run.warnings) or run.path is None


def test_unwritable_output_dir_warns_once(tmp_path, xw):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    blocker = tmp_path / "file"
    blocker.write_text("")
    # root ignores permission bits; a path through a file fails for everyone.
    unwritable = target if os.geteuid() != 0 else blocker / "runs"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            with ns.profile_neuron(output_dir=unwritable) as run:
                rmsnorm_naive(*xw)
            run.wait(30)
    ours = [w for w in caught if "cannot write run directories" in str(w.message)]
    assert len(ours) == 1
    assert run.summary is not None and run.path is None


def test_1000_profiled_calls_never_leave_more_than_50_run_dirs(tmp_path, xw):
    out = tmp_path / "runs"
    ns.configure(max_runs=50)
    x, w = xw

    @ns.profile_neuron(name="many", output_dir=out)
    def infer(a):
        return a.sum()

    most = 0
    t0 = time.monotonic()
    for i in range(1000):
        infer(x)
        if i % 10 == 0 and out.exists():
            most = max(most, len(os.listdir(out)))
    ns.flush(60)
    most = max(most, len(os.listdir(out)))
    s = ns.stats()
    print(f"1000 calls in {time.monotonic() - t0:.1f} s: profiled {s['profiled']}, "
          f"skipped under backpressure {s['skipped_backpressure']}; at most {most} run directories")
    assert most <= 50
    assert s["profiled"] + s["skipped_backpressure"] == 1000  # every call written out or skipped up front


def test_max_bytes_keeps_the_output_dir_under_budget(tmp_path, xw):
    out = tmp_path / "runs"
    ns.configure(max_runs=0, max_bytes=200_000)
    for _ in range(30):
        with ns.profile_neuron(output_dir=out, save_trace=True):
            rmsnorm_naive(*xw)
    ns.flush(60)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert 0 < total <= 200_000
    assert len(os.listdir(out)) < 30


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    whole = (DATA / "cpu_rmsnorm.trace.json.gz").read_bytes()
    raw = gzip.decompress(whole)
    files = {
        "empty": b"",
        "truncated_gzip": whole[: len(whole) // 3],
        "truncated_json": raw[: len(raw) // 2],
        "corrupt": raw.replace(b'"traceEvents"', b'"traceEvents": [,,'),
        "binary": os.urandom(4096),
        "huge_line": b'{"traceEvents": [{"ph": "X", "name": "' + b"a" * (40 * 1024 * 1024),
        "deep_nesting": b"[" * 200_000,
    }
    out = {}
    for name, content in files.items():
        p = tmp_path / f"{name}.json"
        p.write_bytes(content)
        out[name] = p
    return out


def test_hostile_trace_files_give_a_clear_error_quickly(tmp_path):
    for name, path in _bad_files(tmp_path).items():
        t0 = time.monotonic()
        with pytest.raises(ns.TraceLoadError) as info:
            ns.load_trace(path)
        elapsed = time.monotonic() - t0
        print(f"{name}: TraceLoadError in {elapsed * 1000:.0f} ms: {str(info.value)[:90]}")
        assert str(path) in str(info.value)
        assert elapsed < 10


def test_hostile_trace_files_in_the_cli_exit_nonzero_without_traceback(tmp_path):
    for name, path in _bad_files(tmp_path).items():
        proc = subprocess.run(
            [sys.executable, "-m", "neuronscope", "show", str(path)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 1, (name, proc.returncode, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr
        assert path.name in proc.stderr


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)
_events = st.lists(
    st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "i", "M", "B"]), "name": st.text(max_size=15)},
        optional={
            "cat": st.sampled_from(["cpu_op", "kernel", "user_annotation", "cuda_runtime", "gpu_user_annotation", "x"])
            | st.text(max_size=5),
            "ts": st.floats(min_value=-1e15, max_value=1e15) | st.integers() | st.text(max_size=5),
            "dur": st.floats(min_value=-1e6, max_value=1e9) | st.integers() | st.none(),
            "tid": st.integers() | st.text(max_size=4),
            "pid": st.integers() | st.text(max_size=4),
            "args": st.dictionaries(st.sampled_from(["External id", "correlation"]), _json_values, max_size=2),
        },
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(_json_values, st.fixed_dictionaries({"traceEvents": _events}, optional={"baseTimeNanoseconds": _json_values})))
def test_fuzz_parser_either_loads_or_raises_trace_load_error(doc):
    raw = json.dumps(doc).encode()
    try:
        trace = parse_trace_bytes(raw, source="fuzz")
    except ns.TraceLoadError:
        return
    ns.summarize(trace)  # whatever loads must also summarise


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=2000))
def test_fuzz_parser_with_arbitrary_bytes(raw):
    try:
        parse_trace_bytes(raw, source="fuzz")
    except ns.TraceLoadError:
        pass


def test_fork_child_starts_clean(xw):
    with ns.profile_neuron(name="parent"):
        rmsnorm_naive(*xw)
    pid = os.fork()
    if pid == 0:  # child: profile and flush must work on a fresh worker
        code = 1
        try:
            with ns.profile_neuron(name="child") as run:
                rmsnorm_naive(*xw)
            code = 0 if ns.flush(30) and run.summary["aten::rsqrt"].calls == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
