"""Property-based API tests: schemathesis generates requests from /openapi.json against a real server.

Bounded: a few examples per operation, loopback only, and a server that allows no executable, so no generated
spec ever launches a player (every session, render and job request ends in a 4xx before that).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

TOKEN = "fuzz-token-0123456789"


# PUT /v1/builds/{digest} takes raw archive bytes: generated bodies go out as they are.
@schemathesis.serializer("application/x-tar", "application/zip", "application/gzip", "application/zstd")
def _raw_bytes(ctx, value):
    return value if isinstance(value, bytes) else str(value).encode()


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"fuzzer": TOKEN}, "allowed_executables": [],
                         "limits": {"body_bytes": 65536}})


def test_api_conforms_to_its_openapi_document(service):
    schema = schemathesis.openapi.from_url(service.url + "/openapi.json")
    schema.config.base_url = service.url
    checks = [
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_schema_conformance,
    ]
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        tested.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(max_examples=6, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=checks, timeout=30)

        run()
    assert "POST /v1/sessions/{session_id}/step" in tested and "POST /v1/steps" in tested and len(tested) == 29  # with /v1/builds/{digest} (4), its manifest, blobs and POST blobs
    assert "Traceback" not in service.log()
