"""One resolver from a path to what it holds (neuronscope/_paths.py): every entry point that
takes a path — ns.diagnose, ns.diagnose_memory, ns.load_trace, ns.compare_ranks and the
``show`` / ``diff`` / ``report`` / ``ranks`` commands — accepts or refuses the same path the
same way, with the same message. And the per-rank table: one column spec for the terminal,
the HTML report, ``str()`` and the JSON."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from cli._profiles import cli_runner
from multirank.synthetic import make_job
from workloads import rmsnorm_naive

import neuronscope as ns
from neuronscope._paths import resolve, resolve_profile, trace_file
from neuronscope.cli import cli
from neuronscope.report.sources import open_source


@dataclass(frozen=True)
class Layouts:
    root: Path
    run: Path  #: a real run directory (profile_neuron, memory=True)
    one_trace: Path  #: a folder holding that run's trace as TensorBoard names it
    one_gz: Path  #: a folder holding it as a plain *.json.gz
    bare_trace_gz: Path  #: a folder holding trace.json.gz, no manifest
    two_traces: Path
    runs: Path  #: a folder of two run directories
    empty: Path
    missing: Path
    job: Path  #: a synthetic torchrun job: rank0/, rank1/ of run directories
    out_one_job: Path  #: an output directory holding that job
    rank_traces: Path  #: one Kineto trace per rank, naming its rank
    with_config: Path  #: one .pt.trace.json next to a config.json


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> Layouts:
    root = tmp_path_factory.mktemp("paths")
    torch.manual_seed(0)
    x, w = torch.randn(4, 64), torch.randn(64)
    with ns.profile_neuron(
        name="paths", output_dir=root / "out", device="cpu", memory=True
    ) as run:
        for _ in range(2):
            rmsnorm_naive(x, w)
    assert run.wait(60) and run.path is not None, run
    gz = run.path / "trace.json.gz"
    raw = gzip.decompress(gz.read_bytes())

    def folder(name: str, files: dict[str, bytes]) -> Path:
        d = root / name
        d.mkdir()
        for file_name, data in files.items():
            (d / file_name).write_bytes(data)
        return d

    runs = root / "runs"
    for name in ("paths-a", "paths-b"):
        shutil.copytree(run.path, runs / name)
    job = make_job(root / "jobs", ranks=2, steps=3, host_us={1: 1000}, save_trace=True)
    rank_files = {}
    for r in (0, 1):
        doc = json.loads(
            gzip.decompress(
                next((job / f"rank{r}").glob("*/trace.json.gz")).read_bytes()
            )
        )
        doc["distributedInfo"] = {"rank": r, "world_size": 2, "backend": "nccl"}
        rank_files[f"rank{r}.trace.json.gz"] = gzip.compress(json.dumps(doc).encode())
    (root / "empty").mkdir()
    return Layouts(
        root=root,
        run=run.path,
        one_trace=folder("one_trace", {"host_1.1700.pt.trace.json": raw}),
        one_gz=folder("one_gz", {"worker0.json.gz": gz.read_bytes()}),
        bare_trace_gz=folder("bare", {"trace.json.gz": gz.read_bytes()}),
        two_traces=folder("two", {"a.pt.trace.json": raw, "b.pt.trace.json": raw}),
        runs=runs,
        empty=root / "empty",
        missing=root / "nope",
        job=job,
        out_one_job=root / "jobs",
        rank_traces=folder("rank_traces", rank_files),
        with_config=folder(
            "with_config", {"host_1.1700.pt.trace.json": raw, "config.json": b"{}"}
        ),
    )


# -- the resolver ---------------------------------------------------------------------------------


def test_what_each_layout_holds(layouts):
    L = layouts
    kinds = {
        L.run: ("run", L.run, (L.run,)),
        L.run / "trace.json.gz": (
            "trace",
            L.run / "trace.json.gz",
            (L.run / "trace.json.gz",),
        ),
        L.one_trace: ("trace", L.one_trace / "host_1.1700.pt.trace.json", None),
        L.one_gz: ("trace", L.one_gz / "worker0.json.gz", None),
        L.bare_trace_gz: ("trace", L.bare_trace_gz / "trace.json.gz", None),
        L.with_config: (
            "trace",
            L.with_config / "host_1.1700.pt.trace.json",
            None,
        ),  # config.json is no trace
        L.two_traces: (
            "traces",
            L.two_traces,
            (L.two_traces / "a.pt.trace.json", L.two_traces / "b.pt.trace.json"),
        ),
        L.runs: ("runs", L.runs, (L.runs / "paths-a", L.runs / "paths-b")),
        L.job: ("job", L.job, tuple(sorted(L.job.glob("rank*/*")))),
        L.out_one_job: (
            "job",
            L.job,
            tuple(sorted(L.job.glob("rank*/*"))),
        ),  # the job it holds
        L.rank_traces: ("traces", L.rank_traces, None),
    }
    for path, (kind, where, members) in kinds.items():
        r = resolve(path)
        assert (r.kind, r.path) == (kind, where), path
        if members is not None:
            assert r.members == members, path
    assert resolve(L.run).trace == L.run / "trace.json.gz"
    assert resolve(L.one_trace).trace == L.one_trace / "host_1.1700.pt.trace.json"
    assert (
        resolve(L.job).trace is None and len(resolve(L.job).members) == 6
    )  # 2 ranks x 3 steps


def test_refusals_name_the_path_and_what_to_pass(layouts):
    L = layouts
    expected = {
        L.missing: [
            str(L.missing),
            "no such file or directory",
            "pass a run directory",
        ],
        L.empty: [str(L.empty), "no trace.json", "no runs found; pass a run directory"],
        L.two_traces: [
            str(L.two_traces),
            "holds 2 traces (a.pt.trace.json, b.pt.trace.json); pass one of them, e.g.",
            "neuronscope ranks",
        ],
        L.runs: [
            str(L.runs),
            "holds 2 run directories (paths-a, paths-b); pass one of them, e.g.",
            str(L.runs / "paths-b"),
        ],
        L.job: [
            str(L.job),
            "is the job directory of a distributed job",
            "pass one rank's run directory, e.g.",
            "ns.compare_ranks",
        ],
    }
    for path, needles in expected.items():
        with pytest.raises(ns.TraceLoadError) as info:
            resolve_profile(path)
        for needle in needles:
            assert needle in str(info.value), (needle, str(info.value))
    # what compare_ranks takes: the same refusals, its own hint
    for path in (L.missing, L.empty):
        with pytest.raises(ns.TraceLoadError, match="pass a job directory"):
            resolve(path, ranks=True)
    make_job(L.root / "two_jobs", ranks=2, steps=1, job_id="j1")
    make_job(L.root / "two_jobs", ranks=2, steps=1, job_id="j2")
    with pytest.raises(
        ns.TraceLoadError, match=r"holds 2 jobs \(j1, j2\); pass one of them"
    ):
        resolve(L.root / "two_jobs")


def test_a_run_saved_without_its_trace(layouts, tmp_path):
    no_trace = tmp_path / "run"
    shutil.copytree(layouts.run, no_trace)
    (no_trace / "trace.json.gz").unlink()
    assert (
        resolve_profile(no_trace).kind == "run"
        and resolve_profile(no_trace).trace is None
    )
    with pytest.raises(ns.TraceLoadError, match="no trace.json.*save_trace=True"):
        trace_file(no_trace)
    with pytest.raises(ns.TraceLoadError, match="no trace.json.*save_trace=True"):
        ns.load_trace(no_trace)


# -- every entry point agrees --------------------------------------------------------------------


def _outcome(call) -> str:
    """ "ok", or the message of the TraceLoadError it raised."""
    try:
        call()
    except ns.TraceLoadError as exc:
        return str(exc)
    return "ok"


def _cli(args: list[str]) -> str:
    result = cli_runner().invoke(cli, [str(a) for a in args])
    if result.exit_code == 0:
        return "ok"
    assert result.exit_code == 1, (args, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, (
        result.stderr
    )
    return result.stderr.removeprefix("neuronscope: error: ").strip()


SINGLE = (
    "run",
    "one_trace",
    "one_gz",
    "bare_trace_gz",
    "with_config",
    "two_traces",
    "runs",
    "empty",
    "missing",
    "job",
)


@pytest.mark.parametrize("layout", SINGLE)
def test_one_profile_entry_points_agree(layouts, layout, tmp_path):
    """A path is one profile for all of them or for none, and the refusal is the same message."""
    path = getattr(layouts, layout)
    expected = _outcome(lambda: resolve_profile(path))
    outcomes = {
        "ns.diagnose": _outcome(lambda: ns.diagnose(path)),
        "ns.diagnose_memory": _outcome(lambda: ns.diagnose_memory(path)),
        "ns.load_trace": _outcome(lambda: ns.load_trace(path)),
        "open_source": _outcome(lambda: open_source(path)),
        "show": _cli(["show", path]),
        "show --json": _cli(["show", path, "--json"]),
        "diff": _cli(["diff", path, path]),
    }
    if layout != "job":  # a job's report is the per-rank page (below)
        outcomes["report"] = _cli(["report", path, "-o", tmp_path / "r.html"])
    assert outcomes == dict.fromkeys(outcomes, expected)


def test_diagnose_a_folder_holding_one_trace_like_show(layouts):
    """The disagreement this fixes: `neuronscope show DIR` read the folder's one trace,
    ns.diagnose(DIR) refused it."""
    d = ns.diagnose(layouts.one_trace)
    assert (
        d.to_dict()
        == ns.diagnose(layouts.one_trace / "host_1.1700.pt.trace.json").to_dict()
    )
    m = ns.diagnose_memory(layouts.one_gz)
    assert (
        m.peak_bytes
        == ns.diagnose_memory(layouts.one_gz / "worker0.json.gz").peak_bytes
        > 0
    )
    shown = json.loads(
        cli_runner().invoke(cli, ["show", str(layouts.one_trace), "--json"]).stdout
    )
    assert shown["source"] == {
        "label": "host_1.1700.pt.trace.json", "kind": "trace",
        "path": str(layouts.one_trace / "host_1.1700.pt.trace.json"), "device": "cpu",
    }  # fmt: skip
    assert shown["diagnosis"]["bound_by"] == d.bound_by


RANKS = ("job", "out_one_job", "rank_traces", "empty", "missing", "runs")


@pytest.mark.parametrize("layout", RANKS)
def test_ranks_entry_points_agree(layouts, layout, tmp_path):
    path = getattr(layouts, layout)
    api = _outcome(lambda: ns.compare_ranks(path))
    assert _cli(["ranks", path, "--jobs", "1"]) == api
    if api == "ok":
        a, b = ns.compare_ranks(path), ns.compare_ranks(resolve(path, ranks=True).path)
        assert [r.rank for r in a.ranks] == [r.rank for r in b.ranks] == [0, 1]
    else:
        assert str(path) in api


@pytest.mark.parametrize("layout", ["job", "out_one_job"])
def test_report_of_a_job_is_the_per_rank_page(layouts, layout, tmp_path):
    out = tmp_path / "r.html"
    assert _cli(["report", getattr(layouts, layout), "-o", out]) == "ok"
    page = out.read_text()
    assert (
        page.count('class="rank-lane"') == 2
        and '<table class="ranks sortable">' in page
    )


# -- the per-rank table: one column spec -----------------------------------------------------------


def test_rank_table_columns_come_from_one_spec(tmp_path):
    from rich.console import Console

    from neuronscope.analysis.ranks import RANK_COLUMNS, RANK_HEADER
    from neuronscope.report.ranks_html import render_ranks_html
    from neuronscope.report.terminal import ranks_renderable

    c = ns.compare_ranks(
        make_job(
            tmp_path,
            ranks=3,
            steps=4,
            host_us={1: 1000},
            hosts={0: "h0", 1: "h1", 2: "h2"},
        )
    )
    headers = [RANK_HEADER, *(col.header for col in RANK_COLUMNS)]
    split = re.compile(r"\s{2,}")

    def rows_of(text: str) -> list[list[str]]:
        lines = [ln.strip() for ln in text.splitlines()]
        first = next(
            i for i, ln in enumerate(lines) if ln.startswith(RANK_HEADER + " ")
        )
        table = [
            ln for ln in lines[first:] if ln.startswith((RANK_HEADER + " ", "rank "))
        ]
        return [split.split(ln) for ln in table]

    plain = rows_of(str(c))
    console = Console(file=io.StringIO(), width=400, color_system=None, no_color=True)
    console.print(ranks_renderable(c, console))
    terminal = rows_of(console.file.getvalue())

    page = render_ranks_html(c)
    table = re.search(
        r'<table class="ranks sortable">(.*?)</table>', page, re.DOTALL
    ).group(1)
    cell = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>")
    html = [cell.findall(tr) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]

    assert plain[0] == terminal[0] == html[0] == headers
    assert plain[1:] == terminal[1:] == html[1:]  # the same cells, formatted the same
    assert [row[0] for row in plain[1:]] == ["rank 0", "rank 1 *", "rank 2"]
    assert [row[-1] for row in plain[1:]] == ["h0", "h1", "h2"]

    data = c.to_dict()["ranks"]
    keys = ["rank", *(col.key for col in RANK_COLUMNS)]
    assert all(
        list(row)[: len(keys)] == keys for row in data
    )  # JSON: the table's columns first, in its order
    for row, r in zip(data, c.ranks):
        assert [row[col.key] for col in RANK_COLUMNS] == [
            round(v, 3) if isinstance(v, float) else v
            for v in (col.value(r) for col in RANK_COLUMNS)
        ]
