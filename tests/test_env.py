"""The one environment parser (neuronscope._env), the one error type for bad arguments, and
the one helper for a contained failure (_stats.contain)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import neuronscope as ns
from neuronscope import _config, _env, _ranks, _stats
from neuronscope.errors import ConfigurationError, NeuronscopeError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "neuronscope"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each bad value is warned about once per process: start every test with none warned."""
    monkeypatch.setattr(_env, "_warned", set())
    monkeypatch.setattr(_stats, "_contained_once", set())


def _warnings(caplog, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if name in r.getMessage() and r.levelno == logging.WARNING
    ]


# -- typed readers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("on", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("off", False),
    ],
)
def test_env_bool_good_values(monkeypatch, raw, expected):
    monkeypatch.setenv("NS_TEST_FLAG", raw)
    assert _env.env_bool("NS_TEST_FLAG", not expected) is expected


@pytest.mark.parametrize("raw, expected", [(None, True), ("", True), ("   ", False)])
def test_env_bool_unset_or_blank_is_the_default(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("NS_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("NS_TEST_FLAG", raw)
    assert _env.env_bool("NS_TEST_FLAG", expected) is expected


def test_env_bool_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("NS_TEST_FLAG", "maybe")
    with pytest.raises(
        ConfigurationError, match=r"NS_TEST_FLAG='maybe': use 1, true, yes or on"
    ):
        _env.env_bool("NS_TEST_FLAG", False)


@pytest.mark.parametrize(
    "raw, expected", [("0", 0), ("42", 42), (" 7 ", 7), ("1_000", 1000)]
)
def test_env_int_good_values(monkeypatch, raw, expected):
    monkeypatch.setenv("NS_TEST_INT", raw)
    assert _env.env_int("NS_TEST_INT", 5, min=0) == expected


def test_env_int_default(monkeypatch):
    monkeypatch.delenv("NS_TEST_INT", raising=False)
    assert _env.env_int("NS_TEST_INT", 5) == 5
    assert _env.env_int("NS_TEST_INT", None) is None


@pytest.mark.parametrize(
    "raw, kwargs, message",
    [
        ("ten", {"min": 1}, "NS_TEST_INT='ten': use a whole number >= 1"),
        ("1.5", {}, "NS_TEST_INT='1.5': use a whole number"),
        ("0", {"min": 1}, "NS_TEST_INT='0': use a whole number >= 1"),
        (
            "70000",
            {"min": 0, "max": 65535},
            "NS_TEST_INT='70000': use a whole number 0-65535",
        ),
        (
            "-1",
            {"min": 0, "note": "0 = no limit"},
            r"NS_TEST_INT='-1': use a whole number >= 0 \(0 = no limit\)",
        ),
    ],
)
def test_env_int_bad_values_name_the_variable_value_and_form(
    monkeypatch, raw, kwargs, message
):
    monkeypatch.setenv("NS_TEST_INT", raw)
    with pytest.raises(ConfigurationError, match=message):
        _env.env_int("NS_TEST_INT", 5, **kwargs)


@pytest.mark.parametrize("raw, expected", [("0", 0.0), ("2.5", 2.5), ("1e1", 10.0)])
def test_env_float_good_values(monkeypatch, raw, expected):
    monkeypatch.setenv("NS_TEST_FLOAT", raw)
    assert _env.env_float("NS_TEST_FLOAT", 1.0, min=0.0) == expected


@pytest.mark.parametrize("raw", ["ten", "-1", "inf", "nan"])
def test_env_float_bad_values(monkeypatch, raw):
    monkeypatch.setenv("NS_TEST_FLOAT", raw)
    with pytest.raises(
        ConfigurationError,
        match=rf"NS_TEST_FLOAT='{raw}': use a number of seconds >= 0",
    ):
        _env.env_float("NS_TEST_FLOAT", 1.0, min=0.0, unit="seconds")


def test_env_float_default(monkeypatch):
    monkeypatch.delenv("NS_TEST_FLOAT", raising=False)
    assert _env.env_float("NS_TEST_FLOAT", 1.5) == 1.5


def test_env_str_and_env_path(monkeypatch):
    monkeypatch.delenv("NS_TEST_STR", raising=False)
    assert _env.env_str("NS_TEST_STR", None) is None
    assert _env.env_path("NS_TEST_STR", Path("/d")) == Path("/d")
    monkeypatch.setenv("NS_TEST_STR", " some/where ")
    assert _env.env_str("NS_TEST_STR", None) == "some/where"
    assert _env.env_path("NS_TEST_STR", None) == Path("some/where")


def test_env_choice(monkeypatch):
    monkeypatch.delenv("NS_TEST_CHOICE", raising=False)
    assert _env.env_choice("NS_TEST_CHOICE", "a", ("a", "b")) == "a"
    monkeypatch.setenv("NS_TEST_CHOICE", "b")
    assert _env.env_choice("NS_TEST_CHOICE", "a", ("a", "b")) == "b"
    monkeypatch.setenv("NS_TEST_CHOICE", "c")
    with pytest.raises(ConfigurationError, match="NS_TEST_CHOICE='c': use one of a, b"):
        _env.env_choice("NS_TEST_CHOICE", "a", ("a", "b"))


def test_env_json_object(monkeypatch):
    monkeypatch.setenv("NS_TEST_JSON", '{"k": 1}')
    assert _env.env_json_object("NS_TEST_JSON", {}) == {"k": 1}
    for bad in ("[1, 2]", "{nope"):
        monkeypatch.setenv("NS_TEST_JSON", bad)
        with pytest.raises(
            ConfigurationError, match="NS_TEST_JSON=.*: use a JSON object"
        ):
            _env.env_json_object("NS_TEST_JSON", {})


def test_readers_take_an_explicit_environment():
    env = {"NS_TEST_INT": "3"}
    assert _env.env_int("NS_TEST_INT", 0, environ=env) == 3
    assert _env.env_int("NS_TEST_INT", 0, environ={}) == 0


def test_lenient_warns_once_per_value_and_uses_the_default(monkeypatch, caplog):
    monkeypatch.setenv("NS_TEST_INT", "ten")
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert _env.env_int("NS_TEST_INT", 5, min=0, lenient=True) == 5
        assert _env.env_int("NS_TEST_INT", 5, min=0, lenient=True) == 5
        monkeypatch.setenv("NS_TEST_INT", "eleven")
        assert _env.env_int("NS_TEST_INT", 5, min=0, lenient=True) == 5
    assert _warnings(caplog, "NS_TEST_INT") == [
        "neuronscope: NS_TEST_INT='ten': use a whole number >= 0; using the default (5)",
        "neuronscope: NS_TEST_INT='eleven': use a whole number >= 0; using the default (5)",
    ]


# -- the registry ----------------------------------------------------------------------------------


def _names_in_source() -> dict[str, set[str]]:
    """Every NEURONSCOPE_* token in the package's source, with the files that mention it."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*"):
        if path.suffix in (".py", ".cpp") and path.is_file():
            for name in re.findall(
                r"NEURONSCOPE_[A-Z0-9_]*", path.read_text(encoding="utf-8")
            ):
                found.setdefault(name, set()).add(str(path.relative_to(SRC)))
    return found


def test_every_neuronscope_variable_in_the_source_is_registered():
    found = _names_in_source()
    assert len(found) > 10  # (the grep works)
    unknown = {}
    for name, files in found.items():
        if name.endswith(
            "_"
        ):  # a family in prose ("NEURONSCOPE_MAX_*"): some variable must match
            if not any(v.startswith(name) for v in _env.VARIABLES):
                unknown[name] = files
        elif name not in _env.VARIABLES:
            unknown[name] = files
    assert not unknown, (
        f"read or mentioned but not in neuronscope._env.VARIABLES: {unknown}"
    )


def test_every_registered_variable_is_used_and_documented():
    found = _names_in_source()
    attrs = {
        var.name: attr
        for attr, var in vars(_env).items()
        if isinstance(var, _env.EnvVar)
    }
    assert set(attrs) == set(_env.VARIABLES)
    code = "\n".join(
        p.read_text(encoding="utf-8") for p in SRC.rglob("*.py") if p.name != "_env.py"
    )
    unused = [
        name
        for name in _env.VARIABLES
        if found.get(name, set()) <= {"_env.py"}
        and not re.search(rf"\b_env\.{attrs[name]}\b", code)
    ]
    assert not unused, f"registered but not read anywhere: {unused}"
    page = (ROOT / "docs" / "production.md").read_text(encoding="utf-8")
    section = page.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(NEURONSCOPE_[A-Z0-9_]+)` \|", section, re.MULTILINE))
    assert rows == set(_env.VARIABLES), (
        "docs/production.md's table and the registry differ"
    )


@pytest.mark.parametrize("var", list(_env.VARIABLES.values()), ids=list(_env.VARIABLES))
def test_each_registered_variable_defaults_and_rejects_nonsense(monkeypatch, var):
    monkeypatch.delenv(var.name, raising=False)
    assert var.get() == var.default
    assert (
        var.form
        and var.what
        and var.shown_default
        and var.scope in ("library", "cli", "testing")
    )
    monkeypatch.setenv(var.name, "not@valid")
    if var.form in ("a path", "text"):  # anything is a path or a text
        assert var.get() is not None
        return
    with pytest.raises(ConfigurationError) as info:
        var.get()
    assert str(info.value) == f"{var.name}='not@valid': use {var.form}"


def test_registered_parsers_accept_what_the_docs_promise(monkeypatch):
    good = {
        "NEURONSCOPE_MAX_RUNS": ("0", 0),
        "NEURONSCOPE_MAX_BYTES": ("1048576", 1048576),
        "NEURONSCOPE_MAX_PENDING_BYTES": ("0", 0),
        "NEURONSCOPE_WORKER_NICE": ("19", 19),
        "NEURONSCOPE_PROMETHEUS_PORT": ("9464", 9464),
        "NEURONSCOPE_EXIT_FLUSH_TIMEOUT": ("2.5", 2.5),
        "NEURONSCOPE_DISABLED": ("yes", True),
        "NEURONSCOPE_CONTROL": ("0", False),
        "NEURONSCOPE_FAKE_EXPLORER_SCHEMA": ("2.34", "2.34"),
        "NEURONSCOPE_FAKE_EXPLORER_SUMMARY": ('{"a": 1}', {"a": 1}),
        "NEURONSCOPE_JOB_ID": ("slurm-1", "slurm-1"),
    }
    for name, (raw, expected) in good.items():
        monkeypatch.setenv(name, raw)
        assert _env.VARIABLES[name].get() == expected, name


def test_check_names_every_bad_library_variable_and_leaves_the_others(monkeypatch):
    monkeypatch.setenv("NEURONSCOPE_MAX_RUNS", "ten")
    monkeypatch.setenv("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", "soon")
    monkeypatch.setenv(
        "NEURONSCOPE_FAKE_EXPLORER_SCHEMA", "9"
    )  # scope "testing": not checked by default
    with pytest.raises(ConfigurationError) as info:
        _env.check()
    message = str(info.value)
    assert (
        "NEURONSCOPE_MAX_RUNS='ten': use a whole number >= 0 (0 = no limit)" in message
    )
    assert (
        "NEURONSCOPE_EXIT_FLUSH_TIMEOUT='soon': use a number of seconds >= 0" in message
    )
    assert "FAKE_EXPLORER" not in message
    with pytest.raises(
        ConfigurationError, match="NEURONSCOPE_FAKE_EXPLORER_SCHEMA='9'"
    ):
        _env.check(scopes=("testing",))
    _env.check(environ={})  # nothing set: nothing to say


# -- where a bad value is read while the user's code runs: warned once, default used ---------------


def test_bad_retention_and_backlog_variables_warn_once_and_use_the_defaults(
    monkeypatch, caplog
):
    monkeypatch.setenv("NEURONSCOPE_MAX_RUNS", "ten")
    monkeypatch.setenv("NEURONSCOPE_MAX_BYTES", "-5")
    monkeypatch.setenv("NEURONSCOPE_MAX_PENDING_BYTES", "lots")
    settings = _config.Settings()
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        for _ in range(3):
            assert settings.retention() == (
                _config.DEFAULT_MAX_RUNS,
                _config.DEFAULT_MAX_BYTES,
            )
            assert (
                settings.resolved_max_pending_bytes()
                == _config.DEFAULT_MAX_PENDING_BYTES
            )
    assert _warnings(caplog, "NEURONSCOPE_MAX_RUNS") == [
        "neuronscope: NEURONSCOPE_MAX_RUNS='ten': use a whole number >= 0 (0 = no limit); using the default (100)"
    ]
    assert len(_warnings(caplog, "NEURONSCOPE_MAX_BYTES")) == 1
    assert _warnings(caplog, "NEURONSCOPE_MAX_PENDING_BYTES") == [
        (
            "neuronscope: NEURONSCOPE_MAX_PENDING_BYTES='lots': use a whole number >= 0 (0 = no limit); "
            "using the default (256 MiB)"
        )
    ]
    # configure()'s values win without reading the variables
    assert _config.Settings(
        max_runs=0, max_bytes=7, max_pending_bytes=9
    ).retention() == (None, 7)


def test_bad_switches_warn_and_keep_their_defaults(monkeypatch, caplog):
    monkeypatch.setenv("NEURONSCOPE_DISABLED", "ture")
    monkeypatch.setenv("NEURONSCOPE_CONTROL", "disabled")
    monkeypatch.setenv("NEURONSCOPE_KEEP_USDT", "please")
    from neuronscope.capture import usdt

    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert _config.disabled_by_environment() is False
        assert _config.Settings().control_enabled() is True
        assert usdt.suppressing() is True
    for name in (
        "NEURONSCOPE_DISABLED",
        "NEURONSCOPE_CONTROL",
        "NEURONSCOPE_KEEP_USDT",
    ):
        assert len(_warnings(caplog, name)) == 1, name
    monkeypatch.setenv("NEURONSCOPE_DISABLED", "1")
    assert _config.disabled_by_environment() is True


def test_output_dir_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "env"))
    assert _config.Settings().resolved_output_dir() == tmp_path / "env"
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", "")
    assert _config.Settings().resolved_output_dir() == Path("neuronscope-runs")
    assert _config.Settings().resolved_output_dir(tmp_path) == tmp_path


@pytest.mark.parametrize("raw", ["ten", "-1", "inf", "nan", "10s"])
def test_a_bad_exit_flush_timeout_falls_back_to_10_s_without_raising(
    monkeypatch, caplog, raw
):
    """What the exit handler reads (capture/wiring.py): a typo must not skip the provider
    shutdown that follows the flush."""
    monkeypatch.setenv("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", raw)
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert _env.EXIT_FLUSH_TIMEOUT.get(lenient=True) == 10.0
    assert _warnings(caplog, "NEURONSCOPE_EXIT_FLUSH_TIMEOUT") == [
        f"neuronscope: NEURONSCOPE_EXIT_FLUSH_TIMEOUT={raw!r}: use a number of seconds >= 0; using the default (10)"
    ]
    monkeypatch.setenv("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", "0.5")
    assert _env.EXIT_FLUSH_TIMEOUT.get(lenient=True) == 0.5


def test_a_bad_prometheus_port_is_ignored_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("NEURONSCOPE_PROMETHEUS_PORT", "http")
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert _env.PROMETHEUS_PORT.get(lenient=True) is None
    assert _warnings(caplog, "NEURONSCOPE_PROMETHEUS_PORT") == [
        "neuronscope: NEURONSCOPE_PROMETHEUS_PORT='http': use a whole number 0-65535 (0 picks a free one); ignoring it"
    ]


def test_torchrun_variables_are_read_leniently(caplog):
    env = {"RANK": "one", "WORLD_SIZE": "2", "NEURONSCOPE_JOB_ID": " job-7 "}
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        assert (
            _ranks.detect(env=env, dist=False) is None
        )  # no valid rank: a single-process run
    assert len(_warnings(caplog, "RANK='one'")) == 1
    info = _ranks.detect(env={**env, "RANK": "1"}, dist=False)
    assert info is not None and (info.rank, info.world_size, info.job_id) == (
        1,
        2,
        "job-7",
    )


# -- one error type for bad arguments ----------------------------------------------------------------


def test_configuration_error_is_a_value_error_and_a_type_error():
    assert issubclass(ConfigurationError, NeuronscopeError)
    assert issubclass(ConfigurationError, ValueError) and issubclass(
        ConfigurationError, TypeError
    )
    for caught in (ValueError, TypeError, NeuronscopeError, ns.ConfigurationError):
        with pytest.raises(caught):
            raise ConfigurationError("x")


def test_region_misuse_raises_configuration_error_that_old_handlers_still_catch():
    with pytest.raises(ConfigurationError, match="non-empty string"):
        ns.region("")
    with pytest.raises(ValueError, match="non-empty string"):
        ns.region("  ")
    with pytest.raises(ConfigurationError, match="needs a name"), ns.region():
        pass
    with pytest.raises(TypeError, match="takes a name or a function"):
        ns.region(3)
    with pytest.raises(ConfigurationError, match="brackets"), ns.region:
        pass


def test_other_public_argument_checks_raise_configuration_error():
    from neuronscope.analysis.summary import Summary
    from neuronscope.report.terminal import sort_rows
    from neuronscope.trace.model import Trace

    with pytest.raises(ConfigurationError, match="sort='size'"):
        sort_rows([], "size")
    with pytest.raises(ConfigurationError, match="at least one trace"):
        Trace.concat([])
    with pytest.raises(ConfigurationError, match=r"top\(n\)"):
        Summary(rows=()).top(-1)


# -- one helper for a contained failure -------------------------------------------------------------


def test_contain_counts_logs_and_notes(caplog):
    notes: list[str] = []
    before = ns.stats()["errors"]
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            _stats.contain("diagnosis", exc, name="infer", warnings=notes)
    assert ns.stats()["errors"] == before + 1
    assert notes == ["diagnosis failed: RuntimeError('boom')"]
    (record,) = [r for r in caplog.records if "diagnosis" in r.getMessage()]
    assert record.getMessage() == "neuronscope: diagnosis of 'infer' failed: boom"
    assert record.levelno == logging.WARNING and record.exc_info is not None


def test_contain_notes_through_a_function_too():
    notes: list[str] = []
    _stats.contain(
        "device exporter", OSError("disk"), warnings=notes.append, exc_info=False
    )
    assert notes == ["device exporter failed: OSError('disk')"]


def test_contain_without_traceback_or_run(caplog):
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        _stats.contain("sink", ValueError("bad"), exc_info=False)
    (record,) = [r for r in caplog.records if "sink" in r.getMessage()]
    assert (
        record.getMessage() == "neuronscope: sink failed: bad"
        and record.exc_info is None
    )


def test_contain_once_logs_the_first_failure_and_counts_every_one(caplog):
    before = ns.stats()["errors"]
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        for i in range(3):
            _stats.contain("recording metrics", OSError(f"down {i}"), once=True)
    assert ns.stats()["errors"] == before + 3
    assert [
        r.getMessage() for r in caplog.records if "recording metrics" in r.getMessage()
    ] == ["neuronscope: recording metrics failed: down 0"]


def test_stats_has_no_counter_that_nothing_sets():
    assert "dropped" not in ns.stats()


def test_the_exit_handler_with_a_bad_timeout_flushes_for_10_s_and_still_shuts_down(
    monkeypatch, caplog
):
    from neuronscope.capture import wiring

    calls: list[tuple] = []
    monkeypatch.setenv("NEURONSCOPE_EXIT_FLUSH_TIMEOUT", "ten")
    monkeypatch.setattr(
        wiring, "flush", lambda timeout: calls.append(("flush", timeout)) or True
    )
    # the exporters' shutdown that follows the flush (sinks.shutdown; _otel.shutdown_providers before the sinks registry)
    owner, name = (
        (wiring.sinks, "shutdown")
        if hasattr(wiring, "sinks")
        else (wiring._otel, "shutdown_providers")
    )
    monkeypatch.setattr(owner, name, lambda: calls.append(("shutdown",)))
    with caplog.at_level(logging.WARNING, logger="neuronscope"):
        wiring._flush_at_exit()
    assert calls == [("flush", 10.0), ("shutdown",)]
    assert len(_warnings(caplog, "NEURONSCOPE_EXIT_FLUSH_TIMEOUT='ten'")) == 1
