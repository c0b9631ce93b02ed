"""Rank detection from torchrun's environment and torch.distributed (_ranks.py)."""

from __future__ import annotations

import logging
import os
import socket
from types import SimpleNamespace

import pytest

from neuronscope import ConfigurationError
from neuronscope._ranks import detect, job_dir_name, parse_ranks

TORCHRUN = {
    "RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
    "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500",
}


def test_no_torchrun_environment_is_a_single_process_run():
    assert detect({}, dist=None) is None
    assert detect({"MASTER_ADDR": "x", "MASTER_PORT": "1"}, dist=None) is None


def test_torchrun_environment():
    info = detect(TORCHRUN, dist=None)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank) == (3, 8, 1, 2, 1)
    assert info.restart_count == 2 and info.source == "env" and info.backend is None
    assert info.job_id == "10.0.0.5:29500"  # torchrun's default run id "none" is not an id
    assert info.job_dir == "10.0.0.5_29500"
    assert info.host == socket.gethostname()
    m = info.manifest()
    assert (m["rank"], m["local_rank"], m["world_size"], m["node_rank"], m["job_id"]) == (3, 1, 8, 1, "10.0.0.5:29500")


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"TORCHELASTIC_RUN_ID": "f00dcafe"}, "f00dcafe"),  # --rdzv-id, or --standalone's uuid
        ({"TORCHELASTIC_RUN_ID": "f00dcafe", "NEURONSCOPE_JOB_ID": "slurm-4242"}, "slurm-4242"),
        ({"TORCHELASTIC_RUN_ID": ""}, "10.0.0.5:29500"),
    ],
)
def test_job_id_precedence(extra, expected):
    assert detect({**TORCHRUN, **extra}, dist=None).job_id == expected


def test_without_any_job_variable_the_ranks_of_one_host_share_their_parent():
    env = {"RANK": "0", "WORLD_SIZE": "2"}
    assert detect(env, dist=None).job_id == f"{socket.gethostname()}-{os.getppid()}"


def test_node_rank_fallback():
    env = {k: v for k, v in TORCHRUN.items() if k != "GROUP_RANK"}
    assert detect({**env, "NODE_RANK": "4"}, dist=None).node_rank == 4
    assert detect(env, dist=None).node_rank is None


def test_initialised_process_group_wins_over_the_environment():
    dist = SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: 5, get_world_size=lambda: 6,
        get_backend=lambda: "gloo",
    )
    info = detect(TORCHRUN, dist=dist)
    assert (info.rank, info.world_size, info.backend, info.source) == (5, 6, "gloo", "torch.distributed")
    # a process group started without torchrun's variables (mp.spawn)
    assert detect({}, dist=dist).rank == 5
    not_yet = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False)
    assert detect(TORCHRUN, dist=not_yet).source == "env"


def test_bad_variables_are_ignored_with_a_warning_naming_them(caplog):
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert detect({**TORCHRUN, "RANK": "three"}, dist=None) is None
    assert "RANK='three'" in caplog.text
    assert detect({**TORCHRUN, "RANK": "9"}, dist=None) is None  # rank >= world size


@pytest.mark.parametrize(
    "job, expected",
    [("127.0.0.1:29500", "127.0.0.1_29500"), ("../../etc", "etc"), ("", "job"), ("a b/c", "a_b_c"), ("x" * 300, "x" * 96)],
)
def test_job_dir_name_is_one_safe_directory_name(job, expected):
    assert job_dir_name(job) == expected


def test_parse_ranks():
    assert parse_ranks("all") is None
    assert parse_ranks([0, 2]) == frozenset({0, 2})
    assert parse_ranks(1) == frozenset({1})
    assert parse_ranks(range(2)) == frozenset({0, 1})


@pytest.mark.parametrize("bad", ["0", "some", [], [-1], [True], [1.5], True, 2.0])
def test_parse_ranks_rejects_what_it_cannot_use(bad):
    with pytest.raises(ConfigurationError, match="ranks="):
        parse_ranks(bad)


def _process_group(store, rank: int) -> SimpleNamespace:
    return SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: rank, get_world_size=lambda: 2,
        get_backend=lambda: "gloo", distributed_c10d=SimpleNamespace(_get_default_store=lambda: store),
    )


def test_a_relaunch_with_the_same_job_id_gets_other_trace_ids():
    """Plain torchrun sets TORCHELASTIC_RUN_ID=none, so the job id is MASTER_ADDR:PORT, the same
    for every launch: a launch id shared through the process group's store tells them apart."""
    import torch.distributed as dist

    from neuronscope.sinks.otel.distributed import step_context

    def trace_id(info) -> int:
        manifest = info.manifest()
        manifest["distributed"]["call_index"] = 0
        return step_context(SimpleNamespace(manifest=manifest, name="train"), None).trace_id

    first_launch = dist.HashStore()  # torchrun's TCPStore: a new one for every launch
    r0, r1 = (detect(TORCHRUN, dist=_process_group(first_launch, rank)) for rank in (0, 1))
    assert r0.launch_id and r0.launch_id == r1.launch_id  # every rank reads the one the first put
    assert trace_id(r0) == trace_id(r1)  # one trace per step across ranks
    again = detect(TORCHRUN, dist=_process_group(dist.HashStore(), 0))
    assert again.job_id == r0.job_id and again.launch_id != r0.launch_id
    assert trace_id(again) != trace_id(r0)
    # no store (a custom process group): the job id alone, as before
    assert detect(TORCHRUN, dist=_process_group(None, 0)).launch_id is None
