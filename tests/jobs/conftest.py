"""Fixtures for the job tests; the helpers live in ``job_helpers`` (a unique module name: every test
directory has a conftest)."""

import pytest
from job_helpers import direct_frames, small_job


@pytest.fixture(scope="session")
def reference_frames():
    return direct_frames(small_job("unused"))
