"""schemathesis against our own OpenAPI schema (bounded examples): no 5xx, every response — errors included —
matches the schema, and bad input is refused."""

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.services import CSRF_TOKEN
from tests.triage.factories import make_call

# Per operation; CI keeps it small. TRIAGE_FUZZ_EXAMPLES=250 runs the thousands of cases quoted in the notes.
FUZZ_EXAMPLES = int(os.environ.get("TRIAGE_FUZZ_EXAMPLES", "25"))
CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


# Loaded at collection (the schema view needs no database). schemathesis' lazy `from_fixture` mode does not
# work with pytest 9 (it rewrites `Function._nodeid`), so the eager mode it is: one test per operation.
# The guidance stream is left out: it answers a call that has not ended with an endless event stream (its
# refusals are tested in test_call_stream.py).
schema = (
    schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    .include(path_regex=r"^/api/v1/")
    .exclude(path_regex=r"/stream$")
)


@pytest.fixture
def keep_test_connection():
    """Like Django's test client: keep the test's connection (and its transaction) across WSGI requests."""
    signals = (request_started, request_finished)
    for signal in signals:
        signal.disconnect(close_old_connections)
    yield
    for signal in signals:
        signal.connect(close_old_connections)


@pytest.fixture
def fuzz_auth(db, keep_test_connection, redis_conn, client_and_token, dispatcher, client):
    """Bearer headers for the call-system operations, a dispatcher's session for the override."""
    for _ in range(3):
        make_call(client=client_and_token[0])  # something for GET and cancel to find (ids 1.. are likely)
    client.force_login(dispatcher)
    session = {
        "Cookie": f"sessionid={client.cookies['sessionid'].value}; csrftoken={CSRF_TOKEN}",
        "X-CSRFToken": CSRF_TOKEN,
    }
    return {"bearer": {"Authorization": f"Bearer {client_and_token[1]}"}, "session": session}


@schema.parametrize()
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_never_fails_and_always_answers_as_documented(case, fuzz_auth):
    headers = fuzz_auth["session"] if case.method == "PATCH" else fuzz_auth["bearer"]
    case.call_and_validate(headers=headers, checks=CHECKS)
