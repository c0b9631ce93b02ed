"""A run profiled in windows tells the same truth as the same run profiled whole (issue 34.2).

A real training loop (an MLP, AdamW, a DataLoader that decodes its samples in the training
process) runs under ``neuronscope run`` twice: whole (``--no-windows``) and in windows of 0.4 s
(the default profile of a long run, made short). Both must give the same verdict, the same top
finding (rule and subject) and the same time at stake per step within 1.5x — per *recorded*
step: the windows record a part of the steps. The folded run must also read right: each note
once, "+N more" exact, steps named after what counted them, what ended each window, every
window in windows.json. Expected figures come from the run directories' JSON files.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRAIN = textwrap.dedent(
    """
    import time, torch
    from torch.utils.data import DataLoader, Dataset

    class Decoded(Dataset):  # a sample costs its decoding, in the training process (num_workers=0)
        def __len__(self):
            return 120 * 8
        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.randn(256), i % 10

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = 0
    for x, y in DataLoader(Decoded(), batch_size=8):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        steps += 1
    print("steps", steps)
    """
)


def _profile(tmp_path: Path, name: str, *options: str) -> tuple[Path, str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "run", "--output-dir", str(out), *options, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "steps 120" in proc.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir, proc.stdout


def _diagnosis(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())["diagnosis"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("agree")
    whole = _profile(tmp, "whole", "--no-windows")
    windowed = _profile(tmp, "windowed", "--window-seconds", "0.4")
    return {"whole": whole, "windowed": windowed, "tmp": tmp}


def _top_per_step(run_dir: Path) -> float:
    return _diagnosis(run_dir)["findings"][0]["us_per_step"]


def _stakes_per_step(runs: dict) -> tuple[list[float], list[float]]:
    """The top finding's stake per step of whole and windowed runs, in interleaved pairs: the
    data time of a sleeping Dataset grows with the machine's load (a wake-up waits for a core),
    so one pair compares two loads as much as two ways of profiling. A second pair always; a
    third when an arm's own two runs differ by more than 1.25x (its spread says it is noisy)."""
    whole, windowed = [_top_per_step(runs["whole"][0])], [_top_per_step(runs["windowed"][0])]
    for k in range(1, 3):
        if k == 2 and all(max(a) <= 1.25 * min(a) for a in (whole, windowed)):
            break
        whole.append(_top_per_step(_profile(runs["tmp"], f"whole{k}", "--no-windows")[0]))
        windowed.append(_top_per_step(_profile(runs["tmp"], f"windowed{k}", "--window-seconds", "0.4")[0]))
    return whole, windowed


@pytest.mark.timing
def test_whole_and_windowed_give_the_same_verdict_top_finding_and_stake_per_step(runs):
    whole, windowed = _diagnosis(runs["whole"][0]), _diagnosis(runs["windowed"][0])
    manifest = json.loads((runs["windowed"][0] / "manifest.json").read_text())
    assert manifest["coverage"]["windows"] >= 3, manifest["coverage"]  # it really was windowed
    assert whole["bound_by"] == windowed["bound_by"] == "data"
    top_w, top_f = whole["findings"][0], windowed["findings"][0]
    assert (top_f["rule"], top_f["subject"]) == (top_w["rule"], top_w["subject"])
    # per recorded step: the stake found in the recorded windows over the steps inside them
    recorded_steps = windowed["evidence"]["recorded_steps"]
    assert 0 < recorded_steps < 120
    assert top_f["us_per_step"] == pytest.approx(top_f["us_at_stake"] / recorded_steps, rel=1e-3)
    whole_stakes, windowed_stakes = _stakes_per_step(runs)
    ratio = statistics.median(windowed_stakes) / statistics.median(whole_stakes)
    assert 1 / 1.5 <= ratio <= 1.5, (whole_stakes, windowed_stakes)
    # a folded finding's message and evidence are the run's: the batch count in its words is its
    # evidence's, which adds up the windows'
    assert f"{top_f['evidence']['batches']} batches here" in top_f["message"]
    assert top_f["evidence"]["windows"] <= top_f["evidence"]["windows_total"]


def test_the_folded_run_reads_right(runs):
    run_dir, printed = runs["windowed"]
    d = _diagnosis(run_dir)
    # each note once: one line per kind
    kinds = [n.split(":", 1)[0] for n in d["notes"]]
    assert len(kinds) == len(set(kinds)), d["notes"]
    # at most one finding per rule and subject
    subjects = [(f["rule"], f["subject"]) for f in d["findings"]]
    assert len(subjects) == len(set(subjects))
    # the steps are named after what counted them: optimizer steps (the script calls no ns.step())
    assert d["steps"]["source"] == "optimizer" and "steps (optimizer.step)" in printed
    assert "(ns.step)" not in printed
    # "+N more" is exact: N findings after the top one, each listed or counted
    more = len(d["findings"]) - 1
    if more:
        assert f"(+{more} more" in printed
        listed = printed.count("\n  • [")
        rest = more - listed
        assert rest == 0 or f"and {rest} more finding" in printed
    # what ended each window, and every window in the index
    index = json.loads((run_dir / "windows.json").read_text())["windows"]
    assert [r["window"] for r in index] == list(range(1, len(index) + 1))
    assert all(r["ended_by"] in ("window_seconds", "budget", "end") for r in index)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # the last window is the one the end of the program cut, unless the program ended in the pause
    # after a window (on a loaded machine: the last of 40 windows ended 0.34 s before the run)
    assert index[-1]["ended_by"] == "end" or index[-1]["end_ns"] < manifest["end_ns"], (index[-1], manifest["end_ns"])
    cov = manifest["coverage"]
    assert sum(cov["ended_by"].values()) == cov["windows"] == len(index)
    assert "ended by:" in printed and "windows of 0.4 s" not in printed


def test_the_report_of_a_windowed_run_draws_a_kept_windows_timeline(runs, tmp_path):
    run_dir, _ = runs["windowed"]
    index = json.loads((run_dir / "windows.json").read_text())["windows"]
    kept = [r for r in index if r.get("kept")]
    slowest = max(kept, key=lambda r: r["score"])
    html = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "neuronscope", "report", str(run_dir), "-o", str(html)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = html.read_text()
    assert "no trace saved with this run" not in page
    assert f"The timeline of window {slowest['window']} of {len(index)}" in page and 'class="chart timeline"' in page
