"""The vectorised reader of Kineto's [memory] records (issue 19, item 7) against known values:
chunk boundaries, args that moved (wider ts/pid), negative and long numbers, OOM events, and a
layout it cannot read fast (falls back to the record-by-record reader)."""

from __future__ import annotations

import numpy as np
import pytest

from neuronscope.trace import memory as mem
from neuronscope.trace.memory import records_from_kineto_json

BASE = 1_700_000_000_000_000_000


def _op(i: int) -> str:
    return (
        '  {\n    "ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 7,\n'
        f'    "ts": {1000 + i}.500, "dur": 1.0,\n    "args": {{"Input Dims": [[8, 64], [64]], "Ev Idx": {i}}}\n  }}'
    )


def _record(i: int, r: dict[str, int], ts: str, pid: int = 7) -> str:
    args = (f'"Total Reserved": {r["total_reserved"]}, "Total Allocated": {r["total_allocated"]}, "Bytes": {r["bytes"]}, '
            f'"Device Id": {r["device_id"]}, "Device Type": {r["device_type"]}, "Addr": {r["addr"]}, '
            f'"finished": false, "Ev Idx": {i}')
    return (f'  {{\n    "ph": "i",\n    "cat": "cpu_instant_event",\n    "s": "t",\n    "name": "[memory]",\n'
            f'    "pid": {pid},\n    "tid": {pid},\n    "ts": {ts}\n    ,\n    "args": {{\n      {args}\n    }}\n  }}')


def _ts_ns(i: int) -> int:
    return 1_000_000 + 1000 * i + (i * 2654435761) % 1000  # irregular spacing, as real records have


def _times(n: int, first: int = 0) -> np.ndarray:
    return np.array([_ts_ns(i) for i in range(first, first + n)], dtype=np.int64)


def _trace(n: int, seed: int = 0, oom: bool = False, gap: int = 0) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    cols = {
        "total_reserved": rng.choice([0, 0, 0, 2**21, 10**17 + 3], n),  # mostly constant, one 18-digit value
        "total_allocated": rng.integers(0, 10**12, n),
        "bytes": rng.integers(1, 10**9, n) * rng.choice([1, -1], n),
        "device_id": rng.choice([-1, -1, 0, 3], n),
        "device_type": rng.choice([0, 1], n),
        "addr": rng.integers(1, 2**47, n),
    }
    cols["addr"][::97] = 2**62 + 12345  # 19 digits: past the 16-digit fast path
    events = [_op(i) for i in range(50)]
    for i in range(n):
        ts = f"{_ts_ns(i) / 1000:.3f}" + ("" if i % 31 else "000")  # a wider ts moves the args
        events.append(_record(i, {k: int(v[i]) for k, v in cols.items()}, ts, pid=7 if i % 53 else 123456))
        if i % 7 == 0:
            events.append(_op(i))
        if i == 0:
            events += [_op(j) for j in range(gap)]  # ops between the first record and the rest
    if oom:
        events.append('  {\n    "ph": "i", "cat": "cpu_instant_event", "name": "[OutOfMemory]", "pid": 7, "tid": 7,\n'
                      '    "ts": 5000.5,\n    "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096, '
                      '"Total Allocated": 1, "Total Reserved": 2}\n  }')
    text = '{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + ",\n".join(events) + \
        f'\n  ],\n  "baseTimeNanoseconds": {BASE},\n  "traceName": "x"\n}}'
    return text.encode(), cols


def _check(records, cols, n):
    assert len(records) == n
    for k, v in cols.items():
        assert np.array_equal(getattr(records, k), v), k


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_vectorised_reader_known_values(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(mem, "_CHUNK", chunk)  # small chunks: records straddle every boundary
    n = 3000
    raw, cols = _trace(n, oom=True)
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    t = _times(n)
    thread = np.full(n, 7, dtype=np.int64)
    called = []
    monkeypatch.setattr(mem, "_records_by_regex", lambda *a: called.append(a))  # the fast path must suffice
    for source in (path, str(path), raw):
        rec = records_from_kineto_json(source, t, thread, base_ns=None)
        _check(rec, cols, n)
        assert rec.oom == ((round(5000.5 * 1000) + BASE, 4096, 1, 0),)
        assert np.array_equal(rec.time_ns, t)
        # no OOM event in the trace model: read from the end until all n are found (same answer)
        _check(records_from_kineto_json(source, t, thread, oom_events=0), cols, n)
    assert not called


def test_reading_from_the_end_checks_the_records_line_up(monkeypatch):
    monkeypatch.setattr(mem, "_CHUNK", 4096)
    raw, cols = _trace(500, seed=2, gap=100)  # the first record alone in its 4 KiB chunk
    thread = np.zeros(499, dtype=np.int64)
    # the profiler's first 499 records, but the file's last 499 are read: their times do not span the same
    with pytest.raises(ValueError, match="line up"):
        records_from_kineto_json(raw, _times(499), thread, oom_events=0)
    rec = records_from_kineto_json(raw, _times(499, first=1), thread, oom_events=0)
    assert np.array_equal(rec.addr, cols["addr"][1:])


def test_count_mismatch_is_an_error(tmp_path):
    raw, _ = _trace(100)
    with pytest.raises(ValueError, match="memory records"):
        records_from_kineto_json(raw, _times(99), np.zeros(99, dtype=np.int64))


def test_unusual_layout_falls_back_to_the_regex_reader(monkeypatch):
    # a non-numeric value between the numbers: no fixed layout, read record by record
    raw, cols = _trace(200, seed=1)
    raw = raw.replace(b'"Bytes":', b'"Kind": "a", "Bytes":')
    used = []
    slow = mem._records_by_regex
    monkeypatch.setattr(mem, "_records_by_regex", lambda *a: used.append(1) or slow(*a))
    rec = records_from_kineto_json(raw, _times(200), np.zeros(200, dtype=np.int64))
    _check(rec, cols, 200)
    assert used
