"""Problem checks on the runtime's raw files, as the Neuron docs describe its behaviour
(tools/neuron-explorer/troubleshooting.rst, how-to-profile-workload.rst), and the Explorer commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronscope.capture.devices.neuron_artifacts import find_artifacts, parse_dropped_events

INSTANCE = "i-0ade06f040a13f2bf_pid_210229"


def session(root: Path, *, ntffs: dict[int, bytes], neff: bool = True) -> Path:
    d = root / INSTANCE / "20260101_000000_000001"
    d.mkdir(parents=True)
    if neff:
        (d / "neff_395760075800974_vnc_0.neff").write_bytes(b"neff")
    for nc, content in ntffs.items():
        (d / f"profile_nc_{nc}_session_0.ntff").write_bytes(content)
    (d / "ntrace.pb").write_bytes(b"x")
    (d / "trace_info.pb").write_bytes(b"x")
    return d


def test_explorer_commands_open_the_profile_root(tmp_path):
    root = tmp_path / "run" / "neuron"
    session(root, ntffs={0: b"ntff"})
    found = find_artifacts(root, display_name="my-run")
    assert found.profile_root == root and found.has_system_profile
    cmds = found.explorer_commands()
    # get-started.rst Steps 4-5, Option C; view-perfetto.rst
    assert cmds[:5] == [
        f"neuron-explorer view -d {root}",
        f"neuron-explorer view -d {root} --ingest-only --display-name my-run",
        f"neuron-explorer view -d {root} --output-format summary-json --output-file {root.parent / 'explorer' / 'summary.json'}",
        f"neuron-explorer view -d {root} --output-format json --output-file {root.parent / 'explorer' / 'system_profile.json'}",
        f"neuron-explorer view -d {root} --output-format perfetto --output-file {root.parent / 'explorer' / 'system_profile.pftrace'}",
    ]
    # a run directory given instead of its neuron/ folder: still the folder holding <instance>_pid_<pid>/
    assert find_artifacts(tmp_path / "run").profile_root == root


def test_paths_with_spaces_are_quoted(tmp_path):
    root = tmp_path / "my runs" / "neuron"
    session(root, ntffs={0: b"ntff"})
    assert find_artifacts(root).explorer_commands()[0] == f"neuron-explorer view -d '{root}'"


def test_one_idle_core_is_a_note_every_core_empty_is_a_problem(tmp_path):
    found = find_artifacts(session(tmp_path / "a", ntffs={0: b"ntff", 1: b"", 2: b""}).parents[1])
    assert found.all_problems() == []
    (note,) = found.all_notes()
    assert "2 empty NTFFs" in note and "NeuronCore 1, 2 was initialised but never ran" in note
    found = find_artifacts(session(tmp_path / "b", ntffs={0: b"", 1: b""}).parents[1])
    (problem,) = found.all_problems()
    assert problem.startswith("every NTFF is empty (2 files): no device execution was captured; warm up 3+ iterations")
    assert found.all_notes() == []


def test_ntffs_without_neffs_say_where_the_neffs_are(tmp_path):
    found = find_artifacts(session(tmp_path, ntffs={0: b"ntff"}, neff=False).parents[1])
    (problem,) = found.all_problems()
    assert "NTFFs without any NEFF" in problem
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in problem and "neff_cache_dir" in problem and "/tmp/neff_cache/" in problem
    assert found.ntff_files  # still listed


def test_model_mode_pairs_unmatched_neff_is_information(tmp_path):
    d = tmp_path / INSTANCE
    d.mkdir()
    for name in ("neff_222.neff", "222_instid_0_vnc_0.ntff", "neff_333.neff", "444_instid_0_vnc_0.ntff"):
        (d / name).write_bytes(b"x")
    found = find_artifacts(tmp_path)
    groups = {g.id: g for g in found.groups}
    assert groups["333"].problems == [] and groups["333"].notes == [
        "no NTFF with id 333: this NEFF did not run inside the profile (Explorer opens the matching pairs)"
    ]
    assert "matches no NEFF" in groups["444"].problems[0] and "numeric id" in groups["444"].problems[0]
    assert f"neuron-explorer view -n {d / 'neff_222.neff'} -s {d / '222_instid_0_vnc_0.ntff'}" in found.explorer_commands()


def test_a_device_only_capture_leads_with_the_pair_view(tmp_path):
    """Without trace_info.pb / ntrace.pb a directory upload fails ("No metadata found for system
    profile", troubleshooting.rst): the NEFF/NTFF pair view comes first."""
    d = tmp_path / INSTANCE
    d.mkdir()
    for name in ("neff_222.neff", "222_instid_0_vnc_0.ntff"):
        (d / name).write_bytes(b"x")
    found = find_artifacts(tmp_path)
    assert not found.has_system_profile
    cmds = found.explorer_commands()
    assert cmds[0] == f"neuron-explorer view -n {d / 'neff_222.neff'} -s {d / '222_instid_0_vnc_0.ntff'}"
    assert cmds[1] == f"neuron-explorer view -d {tmp_path}"
    (d / "ntrace.pb").write_bytes(b"x")
    (d / "trace_info.pb").write_bytes(b"x")
    assert find_artifacts(tmp_path).explorer_commands()[0] == f"neuron-explorer view -d {tmp_path}"


def test_only_system_files_means_device_profiling_was_off(tmp_path):
    d = tmp_path / INSTANCE / "20260101_000000_000001"
    d.mkdir(parents=True)
    (d / "ntrace.pb").write_bytes(b"x")
    (d / "trace_info.pb").write_bytes(b"x")
    (problem,) = find_artifacts(tmp_path).all_problems()
    assert "only system-profile (.pb) files, device profiling was off" in problem


def test_emulator_only_files_are_not_read(tmp_path):
    d = session(tmp_path, ntffs={0: b"ntff"})
    (d / "emulator_info.json").write_text('{"events_dropped": 9, "max_events_per_nc": 3}')
    (d / "dropped_events.json").write_text('{"dropped_events": 9}')
    assert find_artifacts(tmp_path).all_problems() == []


@pytest.mark.parametrize(
    "text, expected",
    [
        # get-started.rst, troubleshooting row 6 (verbatim)
        (
            "WARN[0000] Warning: 1001 trace events were dropped during capture (stored 530560 out of 531561 total events). "
            "Consider increasing buffer size, reducing trace duration, or filtering events.",
            (1001, 530560, 531561),
        ),
        # troubleshooting.rst symptom, short form
        ("Warning: 12 trace events were dropped", (12, None, None)),
        ("warning: 1,234 trace events were dropped during capture (stored 5 out of 1,239 total events)", (1234, 5, 1239)),
    ],
)
def test_dropped_events_message(text, expected):
    found = parse_dropped_events(f"some output\n{text}\nmore output")
    assert (found.dropped, found.stored, found.total) == expected
    assert found.line == text
    assert "max_events_per_nc" in found.problem()


def test_dropped_events_absent_or_several():
    assert parse_dropped_events("all good\nWarning: something else") is None
    found = parse_dropped_events("Warning: 3 trace events were dropped\nWarning: 30 trace events were dropped\n")
    assert found.dropped == 30
