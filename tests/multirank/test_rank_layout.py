"""A rank of a torchrun job, in this process (torchrun's variables set by hand): where its runs
go, what the manifest says, which ranks profile, and its OpenTelemetry spans."""

from __future__ import annotations

import gzip
import json

import torch

import neuronscope as ns
from neuronscope.analysis.ranks import RANK_FILE
from neuronscope.capture import profile as _profile


def _work() -> None:
    a = torch.randn(64, 64)
    for _ in range(3):
        a = torch.tanh(a @ a)


def test_runs_of_a_rank_go_to_job_and_rank_directories(torchrun_env, _isolated_runs):
    torchrun_env(1, 2, port=29555)
    with ns.profile_neuron(name="step") as first:
        _work()
    with ns.profile_neuron(name="step") as second:
        _work()
    assert ns.flush(30)
    rank_dir = _isolated_runs / "127.0.0.1_29555" / "rank1"
    assert first.path.parent == rank_dir and second.path.parent == rank_dir
    assert first.path != second.path  # a re-run never overwrites
    m = json.loads((first.path / "manifest.json").read_text())
    assert (m["rank"], m["local_rank"], m["world_size"], m["node_rank"], m["job_id"]) == (1, 1, 2, 0, "127.0.0.1:29555")
    assert m["host"] and m["distributed"]["source"] == "env" and m["distributed"]["profiled_ranks"] == "all"
    assert json.loads((second.path / "manifest.json").read_text())["distributed"]["call_index"] == m["distributed"]["call_index"] + 1
    profile = json.loads((first.path / RANK_FILE).read_text())
    assert profile["schema_version"] == 1 and profile["collectives"]["kind"] == []  # no process group here
    assert profile["window"]["compute_us"] > 0
    with gzip.open(first.path / "trace.json.gz", "rt") as f:
        head = json.loads(f.read())
    assert head["neuronscope"]["rank"] == 1 and head["neuronscope"]["job_id"] == "127.0.0.1:29555"
    assert {f["path"] for f in m["files"]} >= {"summary.json", RANK_FILE, "trace.json.gz"}


def test_a_single_process_keeps_todays_layout(_isolated_runs):
    with ns.profile_neuron(name="single") as run:
        _work()
    assert run.path.parent == _isolated_runs
    m = json.loads((run.path / "manifest.json").read_text())
    assert not {"rank", "world_size", "job_id", "distributed"} & set(m)
    assert not (run.path / RANK_FILE).exists()


def test_ranks_chooses_which_ranks_profile(torchrun_env, _isolated_runs):
    torchrun_env(1, 4)
    with ns.profile_neuron(name="only0", ranks=[0]) as run:
        _work()
    assert run.status == ns.RunStatus.SKIPPED and run.path is None
    assert run.skip_reason == "rank 1 is not in profile_neuron(ranks=[0])"
    with ns.profile_neuron(name="me", ranks=[1, 3]) as run:
        _work()
    assert run.path is not None and run.status == ns.RunStatus.COMPLETE

    calls = []

    @ns.profile_neuron(name="deco", ranks=[2])
    def f() -> None:
        calls.append(1)
        _work()

    before = ns.last_run()
    f()
    assert calls == [1] and ns.last_run() is before  # ran, unprofiled: not this rank
    assert ns.flush(30)
    assert sorted(p.name for p in (_isolated_runs / "127.0.0.1_29999").iterdir()) == ["rank1"]


def test_a_single_process_counts_as_rank_0(_isolated_runs):
    with ns.profile_neuron(name="r0", ranks=[0]) as run:
        _work()
    assert run.path is not None and run.status == ns.RunStatus.COMPLETE
    with ns.profile_neuron(name="r1", ranks=[1]) as run:
        _work()
    assert run.status == ns.RunStatus.SKIPPED and "single process" in run.skip_reason


def test_the_decorator_indexes_every_call_sampled_or_not(torchrun_env, _isolated_runs):
    torchrun_env(0, 2)

    @ns.profile_neuron(name="every2", every=2)
    def f() -> None:
        _work()

    for _ in range(5):
        f()
    assert ns.flush(30)
    runs = sorted((_isolated_runs / "127.0.0.1_29999" / "rank0").iterdir())
    indexes = sorted(json.loads((r / "manifest.json").read_text())["distributed"]["call_index"] for r in runs)
    assert indexes == [0, 2, 4]  # calls 0, 2, 4: the same calls on every rank


def _as_rank(torchrun_env, rank: int, world: int = 2) -> None:
    torchrun_env(rank, world, port=29777)
    _profile._call_counters.pop("dist-step", None)  # each "rank" starts its own count, as a process would


def test_every_rank_root_span_goes_under_one_step_span(torchrun_env, telemetry):
    roots = {}
    for rank in (0, 1):
        _as_rank(torchrun_env, rank)
        with ns.profile_neuron(name="dist-step") as run:
            _work()
        run.wait(30)
        roots[rank] = run.manifest["otel"]
    spans = telemetry.finished()
    by_name = {s.name: s for s in spans}
    step = by_name["dist-step step 0"]  # emitted once, by rank 0
    assert [s.name for s in spans].count("dist-step step 0") == 1
    assert step.parent is None
    for rank in (0, 1):
        root = by_name[f"dist-step rank {rank}"]
        assert root.context.trace_id == step.context.trace_id
        assert root.parent.span_id == step.context.span_id and root.parent.is_remote
        assert root.attributes["neuronscope.rank"] == rank and root.attributes["neuronscope.world_size"] == 2
        assert root.attributes["neuronscope.job.id"] == "127.0.0.1:29777"
        assert root.attributes["neuronscope.step.index"] == 0 and root.attributes["host.name"]
        assert roots[rank]["trace_id"] == format(step.context.trace_id, "032x")
    assert step.attributes["neuronscope.world_size"] == 2 and step.attributes["neuronscope.distributed.step"] is True


def test_the_next_step_is_the_next_trace_and_another_job_another(torchrun_env, telemetry):
    ids = []
    _as_rank(torchrun_env, 0)
    for _ in range(2):
        with ns.profile_neuron(name="dist-step") as run:
            _work()
        run.wait(30)
        ids.append(run.manifest["otel"]["trace_id"])
    torchrun_env(0, 2, port=29778)
    _profile._call_counters.pop("dist-step", None)
    with ns.profile_neuron(name="dist-step") as run:
        _work()
    run.wait(30)
    ids.append(run.manifest["otel"]["trace_id"])
    assert len(set(ids)) == 3


def test_the_applications_span_wins(torchrun_env, telemetry):
    _as_rank(torchrun_env, 0)
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        with ns.profile_neuron(name="dist-step") as run:
            _work()
    run.wait(30)
    spans = telemetry.finished()
    root = next(s for s in spans if s.name == "dist-step")  # the plain name: not a step of the job
    assert root.parent.span_id == request.get_span_context().span_id
    assert not any(s.name.startswith("dist-step step") for s in spans)
    assert root.attributes["neuronscope.rank"] == 0  # still says which rank it is


def test_our_own_providers_carry_the_rank_on_the_resource(torchrun_env):
    from neuronscope.sinks.otel.providers import OtelSettings, _build_own

    torchrun_env(1, 2, port=29779)
    tracer_provider, meter_provider = _build_own(OtelSettings(exporter="console"))
    try:
        attrs = tracer_provider.resource.attributes
        assert attrs["service.instance.id"] == "127.0.0.1:29779/rank1"
        assert attrs["neuronscope.rank"] == 1 and attrs["neuronscope.world_size"] == 2 and attrs["host.name"]
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def test_replaying_a_saved_rank_run_gives_the_same_trace(torchrun_env, telemetry):
    _as_rank(torchrun_env, 1)
    with ns.profile_neuron(name="dist-step") as run:
        _work()
    run.wait(30)
    live = run.manifest["otel"]["trace_id"]
    replayed = ns.export_run(run.path)  # e.g. from a node that had no collector at the time
    assert replayed == live
    spans = [s for s in telemetry.finished() if s.name == "dist-step rank 1"]
    assert len(spans) == 2 and {s.parent.span_id for s in spans} == {spans[0].parent.span_id}
