"""Fixtures for the dashboard tests: tiers, calls moved through the real services, session cookies, Redis."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

BOARD_REDIS_PATTERNS = ("triage:board:*", "triage:tokens:*", "triage:engine:*")

# Consumers reach the database from asgiref's worker thread. Without persistent connections that thread
# closes its connection after each call, so the test database can be dropped at the end of the session.
connections.settings["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture(autouse=True)
def role_groups(request: pytest.FixtureRequest) -> None:
    """The role groups (a data migration makes them; a transactional test's flush removes them)."""
    if request.node.get_closest_marker("django_db") is None:
        return
    request.getfixturevalue("db")
    from django.contrib.auth.models import Group

    from triage.roles import ROLES

    for name in ROLES:
        Group.objects.get_or_create(name=name)


def clear_board_redis() -> None:
    from triage.redis_clients import redis_text_client

    r = redis_text_client()
    for pattern in BOARD_REDIS_PATTERNS:
        keys = list(r.scan_iter(match=pattern, count=500))
        if keys:
            r.delete(*keys)


@pytest.fixture
def board_redis() -> Iterator[object]:
    """The real Redis at REDIS_URL with the board's keys deleted by name before and after."""
    from triage.redis_clients import redis_text_client

    clear_board_redis()
    yield redis_text_client()
    clear_board_redis()


@pytest.fixture
def manual_flush() -> Iterator[None]:
    """Stop the background publisher from flushing on its own: the test calls ``flush_dashboard``."""
    from triage.board_feed import publisher

    before = publisher.interval_s
    publisher.interval_s = 3600
    yield
    publisher.interval_s = before
    publisher._users, publisher._task = 0, None


def user_with_password(make_user: Callable[..., object], username: str, role: str) -> str:
    """A user of ``role`` who can log in through the login page (tests.fixtures.browser.PASSWORD)."""
    from tests.fixtures.browser import PASSWORD

    user = make_user(username, role)
    user.set_password(PASSWORD)
    user.save()
    return user.username


@pytest.fixture
def dispatcher_login(make_user: Callable[..., object]) -> str:
    return user_with_password(make_user, "dina", "dispatcher")


@pytest.fixture
def supervisor_login(make_user: Callable[..., object]) -> str:
    return user_with_password(make_user, "sue", "supervisor")


@pytest.fixture
def tiers(db: None) -> None:
    call_command("loaddata", "fixtures/default_tiers.json", verbosity=0)


@pytest.fixture
def make_call(tiers: None, triage_predictor: object) -> Callable[..., object]:
    """A call taken through the real services up to ``status`` (received … done), with ESI ``esi``.

    The trained predictors classify the transcript; the board tests need calls at chosen levels, so the
    recorded level is then set to ``esi`` (probabilities and model version stay the classifier's).
    """
    from triage.models import CallStatus
    from triage.services.assessments import call_triage_record, calls_enqueue
    from triage.services.calls import call_create, call_transition

    counter = iter(range(1, 100_000))
    path = {
        CallStatus.RECEIVED: [],
        CallStatus.QUEUED: [],
        CallStatus.PREFILLING: [CallStatus.PREFILLING],
        CallStatus.DECODING: [CallStatus.PREFILLING, CallStatus.DECODING],
        CallStatus.PREEMPTED: [CallStatus.PREFILLING, CallStatus.DECODING, CallStatus.PREEMPTED],
        CallStatus.DONE: [CallStatus.PREFILLING, CallStatus.DECODING, CallStatus.DONE],
    }

    def make(esi: int = 3, status: str = CallStatus.QUEUED, text: str = "", uncertain_against: int | None = None
             ) -> object:
        transcript = text or f"Caller reports a problem, case {esi}."
        # One transaction: the triage task sent on commit finds the call triaged already, so a Celery
        # worker running elsewhere in the session (the browser tests start one) leaves it alone.
        with transaction.atomic():
            call, _ = call_create(
                client=None, external_id=f"ext-{next(counter)}", received_at=timezone.now(), transcript=transcript,
                location_address="1 High Street",
            )
            if status == CallStatus.RECEIVED:
                return call
            [classified] = triage_predictor.predict([transcript])
            # the verdict the test asks for: ESI ``esi``, uncertain against another level only when asked
            prediction = dataclasses.replace(classified, esi=esi, alternative_esi=uncertain_against,
                                             uncertain=classified.uncertain or uncertain_against is not None)
            call_triage_record(
                call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1.0
            )
        calls_enqueue(call_ids=[call.pk])  # idempotent: the on-commit enqueue may have run already
        for step in path[status]:
            updates = {"guidance": "Check breathing.", "output_tokens": 3} if step == CallStatus.DONE else None
            call_transition(call=call, to_status=step, actor="system:inference", updates=updates)
        call.refresh_from_db()
        return call

    return make


def session_cookie(user: object) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def dispatcher_cookie(dispatcher: object) -> str:
    return session_cookie(dispatcher)
