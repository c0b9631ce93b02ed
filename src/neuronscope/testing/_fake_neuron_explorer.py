"""A stand-in ``neuron-explorer`` for CI: reads the emulated runtime's files, writes Explorer's documented outputs.

Installed as an executable by :func:`neuronscope.testing.install_fake_neuron_explorer`; run
it like the real CLI (``tools/neuron-explorer/get-started.rst``)::

    neuron-explorer --version
    neuron-explorer view -d <profile dir> --output-format summary-json [--output-file F]
    neuron-explorer view -d <profile dir> --output-format json [--ignore-device-profile] [--output-file F]
    neuron-explorer view -d <profile dir> --output-format perfetto [--output-file F]
    neuron-explorer view -d <profile dir> --ingest-only --display-name NAME
    neuron-explorer view -n file.neff -s file.ntff --output-format summary-json

What it writes, field by field, is what the Neuron docs publish:

* ``summary-json``: one object per device profile, keyed by the profile's name, holding
  Summary-table fields (``profile-schema-reference.rst``, schema 7.4.0): ``total_time`` (s),
  ``mfu_estimated_percent``, ``hfu_estimated_percent``, ``mbu_estimated_percent``,
  ``model_flops``, ``hardware_flops``, ``transpose_flops``, ``mm_arithmetic_intensity``,
  ``hbm_read_bytes``, ``hbm_write_bytes``, ``spill_reload_bytes``, ``spill_save_bytes``,
  ``dma_active_time`` (s), ``dma_active_time_percent``,
  ``<engine>_engine_active_time``/``_percent``/``_instruction_count`` for tensor, vector,
  scalar, gpsimd, sync, ``cc_op_active_time_percent``, ``trace_count``, ``event_count``.
  With ``NEURONSCOPE_FAKE_EXPLORER_SCHEMA=2.34`` the fields deprecated in Neuron 2.34 are
  replaced by their successors (``hbm_mbu_estimated_percent``, ``dma_mbu_estimated_percent``,
  ``instruction_hbm_*_bytes``, ``packet_hbm_*_bytes``).
* ``json``: ``system_profile.json`` with ``trace_events`` (fields ``duration``, ``group``,
  ``id``, ``instance_id``, ``lnc_idx``, ``name``, ``parent_id``, ``process_id``,
  ``thread_id``, ``timestamp`` ns, ``type``; framework events type 99999), ``mem_usage``
  (``duration``, ``instance_id``, ``percent_usage``, ``timestamp``, ``usage``) and
  ``cpu_util`` (``cpu_id``, ``duration``, ``instance_id``, ``timestamp``, ``util``)
  (``archive/profiler/neuron-profiler-2-0-beta-user-guide.rst``, "JSON Output").
* when the capture dropped events, stderr gets the documented
  ``WARN[0000] Warning: N trace events were dropped during capture (stored S out of T total events). ...``

The numbers: ``total_time`` and the tensor engine's active time come from the emulated
NTFF (the executions it lists); everything the emulator does not model is a fixed, plausible
value. ``NEURONSCOPE_FAKE_EXPLORER_SUMMARY`` (a JSON object) is merged into every profile's
fields, so a test can put any value at a threshold. The runtime-event ``type`` codes (1, 2)
are the emulator's own: Explorer documents only 11 (``nrt_tensor_write``) and 99999 (framework).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from .. import _env

VERSION = "0.0.0+neuronscope.emulator"
_INSTANCE_DIR = re.compile(r"^(?P<instance>.+)_pid_(?P<pid>\d+)$")
_SESSION_NTFF = re.compile(r"^profile_nc_(?P<nc>\d+)_session_(?P<s>\d+)\.ntff$")
_MODEL_NTFF = re.compile(r"^(?P<id>[0-9A-Za-z]+)_instid_(?P<inst>\d+)_vnc_(?P<vnc>\d+)\.ntff$")
_RUNTIME_TYPES = {"nrta_execute_schedule": 1, "nc_exec_running": 2}
FRAMEWORK_TYPE = 99999
_DEPRECATED_234 = {  # announce-intent-eos-explorer-summary-fields: old -> successors
    "mbu_estimated_percent": ("hbm_mbu_estimated_percent", "dma_mbu_estimated_percent"),
    "hbm_read_bytes": ("instruction_hbm_read_bytes", "packet_hbm_read_bytes"),
    "hbm_write_bytes": ("instruction_hbm_write_bytes", "packet_hbm_write_bytes"),
}


def _log(level: str, msg: str) -> None:
    print(f"{level}[0000] {msg}", file=sys.stderr)


def _instance_of(path: Path) -> tuple[str, str]:
    for part in (path, *path.parents):
        m = _INSTANCE_DIR.match(part.name)
        if m:
            return m["instance"], m["pid"]
    return "i-unknown", "0"


def _executions(ntff: Path) -> list[tuple[int, int]]:
    """(start_ns, duration_ns) of the NEFF executions the emulated NTFF lists."""
    out = []
    for line in ntff.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith("neff_"):
            out.append((int(parts[1]), int(parts[2])))
    return out


def _device_profiles(root: Path | None, neff: Path | None, ntff: Path | None) -> list[tuple[str, Path]]:
    """(profile name, NTFF) for every device profile Explorer would process."""
    if ntff is not None:
        return [(ntff.stem, ntff)]
    assert root is not None
    found = []
    for p in sorted(root.rglob("*.ntff")):
        if p.stat().st_size == 0:
            continue  # an idle core: nothing to summarise
        if _SESSION_NTFF.match(p.name):
            found.append((f"{p.parent.name}/{p.stem}" if p.parent != root else p.stem, p))
        elif (m := _MODEL_NTFF.match(p.name)) and (p.parent / f"neff_{m['id']}.neff").is_file():
            found.append((f"neff_{m['id']}", p))
        elif m:
            _log("ERRO", f"NEFF/NTFF UUID mismatch: no neff_{m['id']}.neff for {p.name}")
    return found


def _summary(ntff: Path, schema: str, overrides: dict[str, Any]) -> dict[str, Any]:
    runs = _executions(ntff)
    if runs:
        start = min(s for s, _ in runs)
        end = max(s + d for s, d in runs)
        busy = sum(d for _, d in runs)
    else:
        start = end = busy = 0
    total = max(end - start, 1) / 1e9
    tensor = min(100.0, 100.0 * busy / 1e9 / total) if runs else 0.0
    hw_flops = int(busy * 5e3)  # any rate: the emulator has no FLOPs
    reads, writes = 4_000_000 * len(runs), 2_000_000 * len(runs)
    f: dict[str, Any] = {
        "total_time": total,
        "neuroncore_cycle_count": int(total * 1.4e9),
        "model_flops": int(hw_flops * 0.9),
        "hardware_flops": hw_flops,
        "transpose_flops": int(hw_flops * 0.05),
        "mm_arithmetic_intensity": (hw_flops * 0.95) / max(reads + writes, 1),
        "hfu_estimated_percent": round(tensor * 0.7, 6),
        "mfu_estimated_percent": round(tensor * 0.6, 6),
        "mbu_estimated_percent": 20.0,
        "hbm_read_bytes": reads,
        "hbm_write_bytes": writes,
        "spill_reload_bytes": reads // 10,
        "spill_save_bytes": writes // 10,
        "dma_active_time": total * 0.4,
        "dma_active_time_percent": 40.0,
        "cc_op_active_time_percent": 0.0,
        "trace_count": 3 * len(runs),
        "event_count": 2 * len(runs),
    }
    for engine, share in (("tensor", 1.0), ("vector", 0.5), ("scalar", 0.25), ("gpsimd", 0.0), ("sync", 0.1)):
        pct = round(tensor * share, 6)
        f[f"{engine}_engine_active_time_percent"] = pct
        f[f"{engine}_engine_active_time"] = total * pct / 100.0
        f[f"{engine}_engine_instruction_count"] = int(len(runs) * 10 * share)
    if schema == "2.34":
        for old, (same, other) in _DEPRECATED_234.items():
            value = f.pop(old)
            f[same] = value
            f[other] = value * 0.5 if old == "mbu_estimated_percent" else value
    f.update(overrides)
    return f


def _ntrace(root: Path) -> tuple[list[dict[str, Any]], dict[str, int]]:
    events: list[dict[str, Any]] = []
    capture: dict[str, int] = {}
    for p in sorted(root.rglob("ntrace.pb")):
        instance, pid = _instance_of(p)
        for line in p.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 7 and parts[0] == "event":
                _, name, start, dur, tid, lnc, _neff = parts
                events.append(
                    {
                        "duration": int(dur),
                        "group": f"nrt-nc-{int(lnc):03d}",
                        "id": len(events) + 1,
                        "instance_id": instance,
                        "lnc_idx": lnc,
                        "name": name,
                        "parent_id": 0,
                        "process_id": pid,
                        "thread_id": int(tid),
                        "timestamp": int(start),
                        "type": _RUNTIME_TYPES.get(name, 0),
                    }
                )
            elif parts and parts[0] == "capture":
                for kv in parts[1:]:
                    k, _, v = kv.partition("=")
                    capture[k] = capture.get(k, 0) + int(v)
    return events, capture


def _framework_events(root: Path, first_id: int) -> list[dict[str, Any]]:
    events = []
    for p in sorted(root.rglob("*.json")):
        if not (p.name == "trace.json" or p.name.startswith("neuron_framework_trace")):
            continue
        try:
            doc = json.loads(p.read_text())
        except ValueError:
            continue
        instance, pid = _instance_of(p)
        base = int(doc.get("baseTimeNanoseconds") or 0)
        for ev in doc.get("traceEvents", []):
            if ev.get("ph") == "X" and ev.get("cat") == "cpu_op":
                events.append(
                    {
                        "duration": round(float(ev.get("dur", 0)) * 1000),
                        "group": f"framework-{ev.get('tid', 0)}",
                        "id": first_id + len(events),
                        "instance_id": instance,
                        "name": ev.get("name", ""),
                        "process_id": pid,
                        "thread_id": int(ev.get("tid", 0)) if str(ev.get("tid", "0")).isdigit() else 0,
                        "timestamp": round(float(ev["ts"]) * 1000) + base,
                        "type": FRAMEWORK_TYPE,
                    }
                )
    return events


def _samples(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    mem, cpu = [], []
    for p in sorted(root.rglob("host_mem.pb")):
        instance, _ = _instance_of(p)
        for line in p.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "sample":
                mem.append(
                    {
                        "duration": 1,
                        "instance_id": instance,
                        "percent_usage": float(parts[3]),
                        "timestamp": int(parts[1]),
                        "usage": int(parts[2]),
                    }
                )
    for p in sorted(root.rglob("cpu_util.pb")):
        instance, _ = _instance_of(p)
        for line in p.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "sample":
                cpu.append(
                    {
                        "cpu_id": parts[2],
                        "duration": 1,
                        "instance_id": instance,
                        "timestamp": int(parts[1]),
                        "util": float(parts[3]),
                    }
                )
    return mem, cpu


def _warn_dropped(capture: dict[str, int]) -> None:
    if capture.get("dropped"):
        _log(
            "WARN",
            f"Warning: {capture['dropped']} trace events were dropped during capture (stored {capture.get('stored', 0)} "
            f"out of {capture.get('total', 0)} total events). Consider increasing buffer size, reducing trace duration, "
            "or filtering events.",
        )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, _unknown = parser.parse_known_args(argv)
    if args.version:
        print(f"neuron-explorer {VERSION}")
        return 0
    if args.command != "view":
        parser.print_usage(sys.stderr)
        return 2
    root = Path(args.directory) if args.directory else None
    neff, ntff = (Path(args.neff) if args.neff else None), (Path(args.ntff) if args.ntff else None)
    if root is None and ntff is None:
        print("View a list of profiles at http://localhost:3001/ (emulated: nothing is served)")
        return 0
    if root is not None and not root.is_dir():
        _log("ERRO", f"No profiling data: {root} is not a directory")
        return 1
    if ntff is not None and (not ntff.is_file() or neff is None or not neff.is_file()):
        _log("ERRO", "device profiles need a matched pair: -n <file.neff> -s <file.ntff>")
        return 1
    if root is not None and not any(root.rglob("trace_info.pb")) and ntff is None:
        _log("ERRO", f"No metadata found for system profile: {root.name}")
        return 1
    _log("INFO", f"Processing profile {root or ntff} (neuronscope emulator)")
    capture = _ntrace(root)[1] if root is not None else {}
    _warn_dropped(capture)
    if args.ingest_only:
        print(f"Profile '{args.display_name or (root or ntff).name}' ingested (emulated): http://localhost:3001/")  # type: ignore[union-attr]
        return 0
    fmt = args.output_format or "parquet"
    overrides = dict(_env.FAKE_EXPLORER_SUMMARY.get())  # a copy: the default is shared
    schema = _env.FAKE_EXPLORER_SCHEMA.get()
    if fmt == "summary-json":
        return _write_summary_json(args, root, neff, ntff, schema, overrides)
    if fmt in ("json", "perfetto"):
        return _write_system_profile(args, fmt, root, neff, ntff, schema, overrides)
    if fmt in ("summary-text", "parquet"):
        for name, p in _device_profiles(root, neff, ntff):
            s = _summary(p, schema, overrides)
            print(f"{name}: total_time={s['total_time']:.6f}s mfu_estimated_percent={s.get('mfu_estimated_percent', 0):.2f}")
        return 0
    _log("ERRO", f"unknown --output-format {fmt!r}")
    return 2


def _parser() -> argparse.ArgumentParser:
    """``neuron-explorer [--version] view ...``: the options neuronscope passes."""
    parser = argparse.ArgumentParser(prog="neuron-explorer", description="neuronscope's stand-in for Neuron Explorer")
    parser.add_argument("--version", action="store_true")
    sub = parser.add_subparsers(dest="command")
    view = sub.add_parser("view")
    view.add_argument("-d", "--session-dir", "--directory", dest="directory")
    view.add_argument("-n", "--neff-path", dest="neff")
    view.add_argument("-s", "--session-file", dest="ntff")
    view.add_argument("--output-format", default=None)
    view.add_argument("--output-file", default=None)
    view.add_argument("--ingest-only", action="store_true")
    view.add_argument("--display-name", default=None)
    view.add_argument("--ignore-device-profile", action="store_true")
    view.add_argument("--ignore-system-profile", action="store_true")
    return parser


def _write_summary_json(
    args: argparse.Namespace, root: Path | None, neff: Path | None, ntff: Path | None, schema: str, overrides: dict[str, Any]
) -> int:
    """``--output-format summary-json``: each device profile's summary, to the file or stdout."""
    profiles = (
        {}
        if args.ignore_device_profile
        else {name: _summary(p, schema, overrides) for name, p in _device_profiles(root, neff, ntff)}
    )
    text = json.dumps(profiles, indent=2)
    if args.output_file:
        Path(args.output_file).write_text(text)
    else:
        print(text)
    return 0


def _write_system_profile(
    args: argparse.Namespace,
    fmt: str,
    root: Path | None,
    neff: Path | None,
    ntff: Path | None,
    schema: str,
    overrides: dict[str, Any],
) -> int:
    """``--output-format json`` / ``perfetto``: the system profile, and a file per device profile."""
    assert root is not None
    events, _ = ([], {}) if args.ignore_system_profile else _ntrace(root)
    events += [] if args.ignore_system_profile else _framework_events(root, len(events) + 1)
    mem, cpu = ([], []) if args.ignore_system_profile else _samples(root)
    out = Path(args.output_file) if args.output_file else Path.cwd() / "system_profile.json"
    out_dir = out.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt == "perfetto":
        (out if args.output_file else out_dir / "system_profile.pftrace").write_bytes(b"")  # placeholder
        return 0
    target = out if out.name == "system_profile.json" else out_dir / "system_profile.json"
    target.write_text(json.dumps({"trace_events": events, "mem_usage": mem, "cpu_util": cpu}))
    if not args.ignore_device_profile:
        for name, p in _device_profiles(root, neff, ntff):
            model_id = name.split("/")[-1].removeprefix("neff_")
            (out_dir / f"device_profile_model_{model_id}.json").write_text(
                json.dumps({"summary": _summary(p, schema, overrides)})  # real contents undocumented
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
