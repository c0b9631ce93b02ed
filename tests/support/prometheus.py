"""A real Prometheus server for tests: Debian's ``prometheus`` binary on a free loopback port.

    with PrometheusServer(targets=["127.0.0.1:9464"], workdir=tmp_path) as prom:
        prom.wait_for_scrapes(2)
        prom.query('neuronscope_op_device_time_seconds_sum')     # /api/v1/query -> result list

The server gets a generated configuration scraping the given targets every second (OpenMetrics
negotiated, so exemplars come through; exemplar storage enabled), its own TSDB directory, and
is stopped (SIGTERM, then SIGKILL) on exit. CI installs the binary in .ci/run
(``apt-get install prometheus``); ``PROMETHEUS_BIN`` points at another one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

__all__ = ["PrometheusError", "PrometheusServer", "find_prometheus", "free_port"]

REQUIRE_ENV = "NEURONSCOPE_REQUIRE_PROMETHEUS"
SCRAPE_INTERVAL_S = 1.0


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered an API call with an error."""


def find_prometheus() -> str | None:
    explicit = os.environ.get("PROMETHEUS_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(targets: list[str]) -> str:
    # JSON is YAML: no YAML library needed to write it.
    return json.dumps(
        {
            "global": {"scrape_interval": f"{int(SCRAPE_INTERVAL_S * 1000)}ms", "scrape_timeout": "900ms"},
            "scrape_configs": [
                {"job_name": "neuronscope", "static_configs": [{"targets": targets}]},
            ],
        },
        indent=2,
    )


class PrometheusServer:
    def __init__(self, targets: list[str], workdir: Path, *, binary: str | None = None, start_timeout: float = 60.0) -> None:
        self.binary = binary or find_prometheus()
        if self.binary is None:
            raise PrometheusError("no prometheus binary (apt-get install prometheus, or set PROMETHEUS_BIN)")
        self.targets = list(targets)
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen | None = None
        self._log = self.workdir / "prometheus.log"
        self._config_override: str | None = None  # tests of this fixture: a config of their own

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> "PrometheusServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(self._config_override or _config(self.targets), encoding="utf-8")
        log = self._log.open("wb")
        self._proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--enable-feature=exemplar-storage",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a Ctrl-C of pytest does not orphan it oddly
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self._proc.returncode} during start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus not ready after {self.start_timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self._log.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    # -- HTTP API ------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns ``data``, raises PrometheusError on an error answer."""
        query = urllib.parse.urlencode([(k.rstrip("_"), v) for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])])
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query: the ``result`` list (vector/matrix) or [scalar] as a one-item list."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"metric": {}, "value": data["result"]}]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}")
        return data["result"]

    def query_exemplars(self, expr: str, start: float, end: float) -> list[dict]:
        return self.api("query_exemplars", query=expr, start=f"{start:.3f}", end=f"{end:.3f}")

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = {"match[]": [match]} if match else {}
        return self.api(f"label/{label}/values", **params)

    def targets_up(self) -> list[dict]:
        return [t for t in self.api("targets")["activeTargets"] if t.get("health") == "up"]

    def scrapes(self) -> int:
        """How many successful scrapes of every target so far (prometheus' own ``up`` samples)."""
        result = self.query("min(sum_over_time(up[1h]))")  # up is 1 for a good scrape, 0 for a failed one
        return int(float(result[0]["value"][1])) if result else 0

    def wait_for(self, what: Callable[[], Any], timeout: float = 30.0, label: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = what()
            if value:
                return value
            if time.monotonic() > deadline:
                raise PrometheusError(f"timed out after {timeout:.0f} s waiting for {label}; log:\n{self.log_tail()}")
            time.sleep(0.2)

    def wait_for_scrapes(self, n: int = 1, timeout: float = 30.0) -> None:
        """Wait until ``n`` more scrapes of every target have happened than when called."""
        base = self.scrapes()
        self.wait_for(lambda: self.scrapes() >= base + n, timeout, f"{n} more scrape(s) of {self.targets}")
