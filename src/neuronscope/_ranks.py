"""Which rank of which distributed job this process is.

torchrun (``python -m torch.distributed.run``) sets, for every worker process::

    RANK, WORLD_SIZE              global rank and number of ranks
    LOCAL_RANK, LOCAL_WORLD_SIZE  rank and ranks on this node
    GROUP_RANK                    the node's (agent's) rank; NODE_RANK on some launchers
    TORCHELASTIC_RUN_ID           the rendezvous id (--rdzv-id; a uuid with --standalone; "none" by default)
    TORCHELASTIC_RESTART_COUNT    how often the workers were restarted
    MASTER_ADDR, MASTER_PORT      the rendezvous store

When ``torch.distributed`` is initialised its rank, world size and backend win over the
environment (they are what the collectives use). No variable and no process group: a
single-process run, and neuronscope behaves exactly as without this module.

The job id names the job's directory (``<output_dir>/<job id>/rank<N>/``) and seeds the
OpenTelemetry trace id of each distributed step, so it must be the same on every rank and
differ between jobs: ``NEURONSCOPE_JOB_ID`` when set (e.g. ``$SLURM_JOB_ID``), else
``TORCHELASTIC_RUN_ID`` unless it is torchrun's default ``none``, else
``MASTER_ADDR:MASTER_PORT``. This module never imports torch (the CLI reads RankInfo too).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from . import _env
from .errors import ConfigurationError

__all__ = ["RankInfo", "current", "detect", "job_dir_name", "parse_ranks"]

log = logging.getLogger("neuronscope")

JOB_ID_ENV = _env.JOB_ID.name
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed job (``None`` fields: not known)."""

    rank: int
    world_size: int
    job_id: str
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None  #: GROUP_RANK (torchrun's node index) or NODE_RANK
    restart_count: int = 0  #: TORCHELASTIC_RESTART_COUNT: elastic restarts of the workers
    backend: str | None = None  #: torch.distributed's backend (gloo, nccl, xla...) once initialised
    source: str = "env"  #: "env" (torchrun's variables) or "torch.distributed"
    host: str = ""
    #: one random id per launch, the same on every rank (through the process group's store):
    #: a relaunch with the same job id (plain torchrun: MASTER_ADDR:PORT) gets other trace ids
    launch_id: str | None = None

    @property
    def job_dir(self) -> str:
        return job_dir_name(self.job_id)

    def manifest(self) -> dict[str, Any]:
        """The facts manifest.json carries at its top level."""
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "node_rank": self.node_rank,
            "job_id": self.job_id,
            "distributed": {
                "local_world_size": self.local_world_size,
                "restart_count": self.restart_count,
                "backend": self.backend,
                "source": self.source,
                "launch_id": self.launch_id,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def job_dir_name(job_id: str) -> str:
    """``job_id`` made safe as one directory name (``127.0.0.1:29500`` -> ``127.0.0.1_29500``)."""
    safe = _UNSAFE.sub("_", job_id).strip("._")[:96]
    return safe or "job"


def _int(env: Mapping[str, str], name: str) -> int | None:
    # torchrun's variables: a malformed one is warned about once and ignored, never raised
    return _env.env_int(name, None, lenient=True, environ=env)


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("neuronscope: %s", message)


def _job_id(env: Mapping[str, str]) -> str | None:
    explicit = _env.JOB_ID.get(environ=env)
    if explicit:
        return explicit
    run_id = _env.env_str("TORCHELASTIC_RUN_ID", "", environ=env)
    if run_id and run_id.lower() != "none":
        return run_id
    addr, port = _env.env_str("MASTER_ADDR", "", environ=env), _env.env_str("MASTER_PORT", "", environ=env)
    if addr or port:
        return f"{addr or 'localhost'}:{port or '0'}"
    return None


def detect(env: Mapping[str, str] | None = None, dist: Any = None) -> RankInfo | None:
    """RankInfo from ``env`` (default ``os.environ``) and an initialised ``torch.distributed``
    module ``dist`` (default: the loaded one, if any); None for a single-process run."""
    env = os.environ if env is None else env
    if dist is None:
        dist = _loaded_dist()
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    source, backend, launch = "env", None, None
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                rank, world, source = int(dist.get_rank()), int(dist.get_world_size()), "torch.distributed"
                backend = str(dist.get_backend())
                launch = _launch_id(dist)
        except Exception:  # a broken process group must not cost the profile (logged)
            log.debug("neuronscope: reading torch.distributed failed", exc_info=True)
    if rank is None or world is None:
        return None
    if world < 1 or not 0 <= rank < world:
        _warn_once("rank-range", f"RANK={rank} WORLD_SIZE={world} is not a valid rank; treating this as a single-process run")
        return None
    job = _job_id(env)
    if job is None:
        # Started without torchrun (mp.spawn with a tcp:// init_method...): the ranks of one
        # host share the parent process. Set NEURONSCOPE_JOB_ID for anything else.
        job = f"{socket.gethostname()}-{os.getppid()}"
    node = _int(env, "GROUP_RANK")
    if node is None:
        node = _int(env, "NODE_RANK")
    return RankInfo(
        rank=rank,
        world_size=world,
        job_id=job,
        local_rank=_int(env, "LOCAL_RANK"),
        local_world_size=_int(env, "LOCAL_WORLD_SIZE"),
        node_rank=node,
        restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT") or 0,
        backend=backend,
        source=source,
        host=socket.gethostname(),
        launch_id=launch,
    )


LAUNCH_KEY = "neuronscope/launch_id"


def _launch_id(dist: Any) -> str | None:
    """A random id the first rank to ask puts in the process group's key-value store (torchrun's
    TCPStore, new for every launch); the others read it back. No collective: a rank that
    profiles alone (``ranks=[0]``) never waits for the others."""
    try:
        store = dist.distributed_c10d._get_default_store()
        value = store.compare_set(LAUNCH_KEY, "", uuid.uuid4().hex[:16])  # sets it only when absent
    except Exception:  # noqa: BLE001 - no store (a custom process group): the job id alone
        log.debug("neuronscope: no launch id from the process group's store", exc_info=True)
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _loaded_dist() -> Any:
    # Never import torch here: if torch.distributed is not loaded, no process group exists.
    return sys.modules.get("torch.distributed")


_lock = threading.Lock()
_cached: RankInfo | None = None
_env_checked = False
_env_distributed = False


def current() -> RankInfo | None:
    """This process's RankInfo (cached once final: the environment does not change, and a
    process group, once initialised, keeps its rank)."""
    global _cached, _env_checked, _env_distributed
    info = _cached
    if info is not None and (info.source == "torch.distributed" or not _dist_initialised()):
        return info
    if _env_checked and not _env_distributed and not _dist_initialised():
        return None  # the common single-process case: two checks, no environment reads
    with _lock:
        info = detect()
        _env_checked = True
        _env_distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
        _cached = info
    return info


def _dist_initialised() -> bool:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    try:
        return bool(dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a broken torch.distributed: no process group
        return False


def _reset() -> None:
    """Forget the cached detection (tests that change the environment)."""
    global _cached, _env_checked, _env_distributed
    with _lock:
        _cached, _env_checked, _env_distributed = None, False, False


def parse_ranks(value: Any) -> frozenset[int] | None:
    """``profile_neuron(ranks=...)``: ``"all"`` (None: every rank) or ranks as ints."""
    if value is None or (isinstance(value, str) and value == "all"):
        return None
    if isinstance(value, bool):
        raise ConfigurationError(f"profile_neuron(ranks={value!r}): use 'all' or a list of ranks, e.g. ranks=[0]")
    if isinstance(value, int):
        value = [value]
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"profile_neuron(ranks={value!r}): use 'all' or a list of ranks, e.g. ranks=[0]")
    out = []
    for r in value:
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ConfigurationError(f"profile_neuron(ranks={value!r}): ranks are ints >= 0 (got {r!r})")
        out.append(r)
    if not out:
        raise ConfigurationError("profile_neuron(ranks=[]): name at least one rank, or use ranks='all'")
    return frozenset(out)


def selected(ranks: frozenset[int] | None) -> bool:
    """Whether this process profiles under ``ranks`` (a single-process run counts as rank 0)."""
    if ranks is None:
        return True
    info = current()
    return (info.rank if info is not None else 0) in ranks


def _after_fork() -> None:
    _reset()  # mp.spawn/fork children get their own RANK


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
