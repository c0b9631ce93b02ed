from __future__ import annotations

import pytest

from cli._profiles import Profiles, build_profiles, cli_runner


@pytest.fixture(scope="session")
def profiles(tmp_path_factory) -> Profiles:
    return build_profiles(tmp_path_factory.mktemp("cli-runs"))


@pytest.fixture
def runner():
    return cli_runner()


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    """Tests decide about colour and width themselves; CI's FORCE_COLOR etc. must not leak in."""
    for var in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES", "NEURONSCOPE_DEBUG"):
        monkeypatch.delenv(var, raising=False)
