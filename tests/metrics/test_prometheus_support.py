"""The Prometheus test fixture itself: fails (not skips) when CI requires Prometheus, reports a
broken start with the server's log, and leaves no process behind."""

from __future__ import annotations

import os

import pytest
from support.prometheus import PrometheusError, PrometheusServer

from metrics.conftest import prometheus_or_skip


def test_missing_binary_skips_locally_and_fails_when_required(monkeypatch):
    monkeypatch.setenv("PROMETHEUS_BIN", "/nonexistent/prometheus")
    monkeypatch.delenv("NEURONSCOPE_REQUIRE_PROMETHEUS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install prometheus"):
        prometheus_or_skip()
    monkeypatch.setenv("NEURONSCOPE_REQUIRE_PROMETHEUS", "1")
    with pytest.raises(pytest.fail.Exception, match="NEURONSCOPE_REQUIRE_PROMETHEUS is set"):
        prometheus_or_skip()


def test_a_server_that_cannot_start_says_why_and_a_good_one_stops(tmp_path):
    prometheus_or_skip()
    bad = PrometheusServer(["127.0.0.1:1"], tmp_path / "bad")
    bad.start_timeout = 20
    # a config Prometheus refuses: the error carries its log
    bad._config_override = "scrape_configs: [{job_name: x, scrape_interval: 1s, scrape_timeout: 5s, static_configs: [{targets: ['a:1']}]}]"
    (tmp_path / "bad").mkdir()
    with pytest.raises(PrometheusError, match="exited"):
        bad.start()
    with PrometheusServer(["127.0.0.1:1"], tmp_path / "good") as good:
        pid = good._proc.pid
        assert good.query("vector(1)")[0]["value"][1] == "1"
        with pytest.raises(PrometheusError, match="parse error"):
            good.query("sum(")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
