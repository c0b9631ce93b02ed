"""The streaming reader (trace/chrome.py): chunk by chunk into the columns, the same Trace as
reading the whole document, clear errors for truncated and too-large files."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import neuronscope as ns
from neuronscope.trace import chrome

COLUMNS = ("kind", "name_id", "start_ns", "duration_ns", "thread", "correlation_id", "linked_correlation_id", "category")


def _events(n: int) -> list[dict]:
    out = []
    for i in range(n):
        # names with the characters the splitter cuts at, inside strings
        name = ["aten::mul", 'weird },{"ph": "X"', "a]b", "aten::mm"][i % 4]
        out.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1 + i % 3, "ts": 10.5 * i, "dur": 3,
                    "args": {"External id": i + 1, "Input Dims": [[8, 64], [64, 64]], "Input type": ["float", "float"],
                             "nested": {"a": {"b": [1, 2]}}}})
        out.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5 * i + 1, "dur": 2,
                    "args": {"correlation": i + 1, "External id": i + 1}})
    out.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})
    return out


def _same(a, b) -> None:
    for c in COLUMNS:
        assert np.array_equal(getattr(a, c), getattr(b, c)), c
    assert a.names == b.names and a.categories == b.categories and a.device == b.device
    assert a.base_time_ns == b.base_time_ns and a.metadata == b.metadata and a.inputs == b.inputs


@pytest.mark.parametrize("layout", ["keys_after_events", "keys_before_events", "bare_list"])
@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_streaming_gives_the_trace_reading_the_whole_file_gives(tmp_path, monkeypatch, layout, chunk):
    events = _events(400)
    if layout == "bare_list":
        doc = json.dumps(events, indent=1)
    elif layout == "keys_before_events":
        doc = json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                          "deviceProperties": [{"id": 0, "name": "X"}], "traceEvents": events})
    else:
        doc = json.dumps({"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0, "name": "X"}],
                          "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1_700_000_000_000_000_000}, indent=2)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc.encode()))
    whole = chrome._parse_whole(doc.encode(), "whole", None)
    monkeypatch.setattr(chrome, "CHUNK", chunk)
    streamed = ns.load_trace(path)
    _same(streamed, whole)
    assert len(streamed) == 800 and streamed.device == "cuda"
    assert len({id(v) for v in streamed.inputs.values()}) == 1  # one shared (shapes, dtypes) per signature


def test_a_truncated_trace_past_the_whole_file_limit_is_named_truncated(tmp_path, monkeypatch):
    doc = json.dumps({"traceEvents": _events(200)})
    path = tmp_path / "cut.trace.json"
    path.write_text(doc[: len(doc) * 2 // 3])
    monkeypatch.setattr(chrome, "CHUNK", 1000)
    monkeypatch.setattr(chrome, "WHOLE_FILE_LIMIT", 0)
    with pytest.raises(ns.TraceLoadError, match="truncated or corrupt") as info:
        ns.load_trace(path)
    assert str(path) in str(info.value)


def test_a_trace_larger_than_the_memory_available_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(2000)}).encode()))
    monkeypatch.setattr(chrome, "_available_memory", lambda: 10_000)
    with pytest.raises(ns.TraceLoadError, match=r"needs about .* GiB of memory .* available") as info:
        ns.load_trace(path)
    assert str(path) in str(info.value)
    monkeypatch.setattr(chrome, "_available_memory", lambda: None)  # no /proc/meminfo: no check
    assert len(ns.load_trace(path)) == 4000


def test_diagnose_reads_a_trace_file_once(tmp_path, monkeypatch):
    path = tmp_path / "t.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(300)}).encode()))
    opened = []
    real = chrome._chunks

    def counting(f, source):
        opened.append(source)
        return real(f, source)

    monkeypatch.setattr(chrome, "_chunks", counting)
    d = ns.diagnose(path)
    assert d.device == "cuda" and opened == [str(path)]
