"""Arize Phoenix as a real OTLP trace backend for tests (started through .ci/phoenix.sh).

    base = phoenix_url()                        # NEURONSCOPE_PHOENIX_URL, or a server of our own
    exporter = OTLPSpanExporter(endpoint=base + "/v1/traces")     # OTLP/HTTP
    ...
    spans = wait_for_spans(base, lambda ss: len(ss) >= 2, timeout=30, trace_id=trace_id_hex)

Phoenix runs from its own venv (.ci/phoenix.sh install; ~850 MB, ~1.5 min the first time) so
that its large dependency set never reaches the project's venv. The REST read-back is
``GET {base}/v1/projects/{project}/spans?limit=N[&cursor=C]`` and answers
``{"data": [span, ...], "next_cursor": str | None}``; each span (arize-phoenix 20.26.1)::

    {"id": "U3Bhbjox", "name": "child",
     "context": {"trace_id": "<32 hex>", "span_id": "<16 hex>"},
     "span_kind": "UNKNOWN", "parent_id": "<16 hex>" | None,
     "start_time": "2023-11-14T22:13:20.124457+00:00", "end_time": "...",   # ISO-8601, MICROseconds
     "status_code": "UNSET" | "OK" | "ERROR", "status_message": "boom",
     "attributes": {"neuronscope.op": "matmul", "n": 3, "l": [1, 2]},        # flat dotted keys
     "events": [{"name": "ev", "timestamp": "...", "attributes": {"k": "v"}}]}

Phoenix keeps times to the microsecond (nanoseconds are rounded): compare with a 1 µs tolerance.
Spans go to project "default" unless the resource sets ``openinference.project.name``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "PhoenixUnavailable",
    "phoenix_url",
    "fetch_spans",
    "wait_for_spans",
    "iso_to_unix_nano",
    "SCRIPT",
]

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "phoenix.sh"
_START_TIMEOUT_S = 600  # first use installs Phoenix (~1.5 min) then starts it (~20 s)

_lock = threading.Lock()
_url: str | None = None


class PhoenixUnavailable(RuntimeError):
    """Phoenix could not be installed or started; the message carries the script's output."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script(action: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), action],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _stop(env: dict[str, str]) -> None:
    _script("stop", env, 30)
    shutil.rmtree(env["PHOENIX_STATE_DIR"], ignore_errors=True)  # pid file + log of our own server


def phoenix_url() -> str:
    """Base URL of a running Phoenix, e.g. "http://127.0.0.1:6006" (no trailing slash).

    ``NEURONSCOPE_PHOENIX_URL`` set: that server is used as is (e.g. one from
    ``.ci/phoenix.sh start``). Otherwise a server of this process's own is installed if need be,
    started once per process on free loopback ports, and stopped at interpreter exit.
    Raises PhoenixUnavailable if it cannot be started.
    """
    global _url
    env_url = os.environ.get("NEURONSCOPE_PHOENIX_URL")
    if env_url:
        return env_url.rstrip("/")
    with _lock:
        if _url is not None:
            return _url
        port = _free_port()
        env = {
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(_free_port()),
            "PHOENIX_STATE_DIR": os.path.join(tempfile.gettempdir(), f"neuronscope-phoenix-run-{port}"),
        }
        steps = []
        try:
            for action in ("install", "start"):
                proc = _script(action, env, _START_TIMEOUT_S)
                steps.append(f"$ phoenix.sh {action}  (rc={proc.returncode})\n{proc.stdout}{proc.stderr}")
                if proc.returncode != 0:
                    raise PhoenixUnavailable("\n".join(steps)[-4000:])
        except subprocess.TimeoutExpired as e:
            _stop(env)
            raise PhoenixUnavailable(f"phoenix.sh timed out after {e.timeout}s\n" + "\n".join(steps)) from e
        atexit.register(_stop, env)
        _url = f"http://127.0.0.1:{env['PHOENIX_PORT']}"
        return _url


def _get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def fetch_spans(base_url: str, limit: int = 1000, project: str = "default", **filters: Any) -> list[dict]:
    """All spans of ``project``, newest first, following ``next_cursor`` page by page.

    ``limit`` is the page size (Phoenix allows 1..1000). ``filters`` are passed as query
    parameters, a list meaning a repeated parameter: trace_id, span_id, name, parent_id ("null"
    for roots), status_code, attribute ("key:value"), start_time/end_time (ISO), sort, order.
    A project that does not exist yet (no span sent to it) gives [].
    """
    spans: list[dict] = []
    params: dict[str, Any] = {"limit": limit, **filters}
    base = f"{base_url.rstrip('/')}/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
    while True:
        try:
            page = _get_json(f"{base}?{urllib.parse.urlencode(params, doseq=True)}")
        except urllib.error.HTTPError as e:
            if e.code == 404:  # "Project with name ... not found"
                return spans
            raise
        spans.extend(page["data"])
        if not page.get("next_cursor"):
            return spans
        params["cursor"] = page["next_cursor"]


def wait_for_spans(
    base_url: str,
    predicate: Callable[[list[dict]], bool],
    timeout: float = 30.0,
    project: str = "default",
    **filters: Any,
) -> list[dict]:
    """Poll fetch_spans until ``predicate(spans)`` is true; return those spans.

    Phoenix ingests asynchronously (about 0.1 s here). Raises TimeoutError with the last spans
    seen. Example: ``wait_for_spans(url, lambda ss: len(ss) >= 2, 30, trace_id=tid)``.
    """
    deadline = time.monotonic() + timeout
    while True:
        spans = fetch_spans(base_url, project=project, **filters)
        if predicate(spans):
            return spans
        if time.monotonic() >= deadline:
            names = [s.get("name") for s in spans][:20]
            raise TimeoutError(f"Phoenix: predicate not met after {timeout}s; {len(spans)} spans seen: {names}")
        time.sleep(0.1)


def iso_to_unix_nano(ts: str) -> int:
    """Phoenix's ISO-8601 time ("2023-11-14T22:13:20.124457+00:00") -> Unix nanoseconds (exact to the µs)."""
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    whole = int(dt.replace(microsecond=0).timestamp())
    return whole * 1_000_000_000 + dt.microsecond * 1_000
