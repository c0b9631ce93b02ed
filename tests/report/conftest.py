from __future__ import annotations

import pytest
from cli._profiles import Profiles, build_profiles


@pytest.fixture(scope="session")
def report_profiles(tmp_path_factory) -> Profiles:
    return build_profiles(tmp_path_factory.mktemp("report-runs"))
