"""No redirect leaves the site: a ``next`` from the request is followed only when it stays on this host."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("board_redis", "redis_conn")]

OFF_SITE = [
    "https://evil.example",
    "http://evil.example/calls/",
    "//evil.example",
    "///evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    "https:evil.example",
    "https://testserver@evil.example/",
    "\x01//evil.example",
    "javascript:alert(1)",
    "\n//evil.example",
]


def _dispatcher_client(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("target", OFF_SITE)
def test_a_board_action_never_redirects_off_site(make_call, dispatcher, target):
    call = make_call(3)
    response = _dispatcher_client(dispatcher).post(f"/calls/{call.pk}/acknowledge/", {"next": target})
    assert response.status_code == 302
    assert response["Location"] == f"/calls/{call.pk}/"  # the call's page instead


@pytest.mark.parametrize(
    ("action", "form"),
    [("override", {"level": 2, "reason": "worse than it sounded"}), ("close", {"outcome": "Ambulance sent"}),
     ("cancel", {"reason": "duplicate"})],
)
def test_every_action_form_ignores_an_off_site_next(make_call, dispatcher, action, form):
    call = make_call(3, status="done") if action == "close" else make_call(3)
    response = _dispatcher_client(dispatcher).post(f"/calls/{call.pk}/{action}/", {**form, "next": "//evil.example"})
    assert response.status_code == 302, response.content[:300]
    assert response["Location"] == f"/calls/{call.pk}/"


@pytest.mark.parametrize("target", ["/", "/calls/?q=chest", "http://testserver/calls/"])
def test_a_next_on_this_site_is_followed(make_call, dispatcher, target):
    call = make_call(3)
    response = _dispatcher_client(dispatcher).post(f"/calls/{call.pk}/acknowledge/", {"next": target})
    assert response.status_code == 302 and response["Location"] == target


@pytest.mark.parametrize("target", ["https://evil.example", "//evil.example", "/\\evil.example"])
def test_login_and_logout_never_redirect_off_site(make_user, target):
    make_user("dora", "dispatcher")
    client = Client()
    login = client.post(f"/accounts/login/?next={target}", {"username": "dora", "password": "pw-dora", "next": target})
    assert login.status_code == 302 and login["Location"] == "/"
    logout = client.post("/accounts/logout/", {"next": target})
    assert logout.status_code == 302 and logout["Location"] == "/accounts/login/"
