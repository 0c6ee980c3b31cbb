"""Brute-force protection on the login: after N failed logins for one username from one address, that pair
is refused for a cool-off, whatever the password; others are not affected."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
HERE, ELSEWHERE = "192.0.2.10", "192.0.2.20"  # documentation addresses: only REMOTE_ADDR values here


def _login(username: str, password: str, address: str = HERE, path: str = LOGIN) -> object:
    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password})
    response.logged_in = "_auth_user_id" in client.session
    return response


def _fail(username: str, times: int, address: str = HERE) -> list[int]:
    return [_login(username, "wrong-password", address).status_code for _ in range(times)]


@pytest.fixture
def dora(make_user):
    return make_user("dora", "dispatcher")  # password pw-dora


def test_the_defaults_are_five_failures_and_fifteen_minutes(settings):
    assert settings.AXES_FAILURE_LIMIT == 5 and settings.AXES_COOLOFF_TIME == timedelta(minutes=15)


def test_after_five_failed_logins_even_the_right_password_is_refused(dora):
    assert _fail("dora", 4) == [200] * 4  # the form again, with its error
    assert _fail("dora", 1) == [429]  # the fifth locks
    locked = _login("dora", "pw-dora")
    assert locked.status_code == 429 and not locked.logged_in
    assert "Too many failed logins" in locked.content.decode() and "15 minutes" in locked.content.decode()


def test_the_admin_login_is_locked_too(dora):
    _fail("dora", 5)
    response = _login("dora", "pw-dora", path="/admin/login/?next=/admin/")
    assert response.status_code == 429 and not response.logged_in


def test_a_lockout_holds_one_username_at_one_address_only(dora, make_user):
    make_user("sam", "supervisor")
    _fail("dora", 5)
    assert _login("dora", "pw-dora", address=ELSEWHERE).logged_in  # nobody can lock dora out of the board
    assert _login("sam", "pw-sam").logged_in  # nor every user behind one address


def test_after_the_cool_off_the_right_password_works_again(dora, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    _fail("dora", 5)
    assert _login("dora", "pw-dora").status_code == 429
    time.sleep(1.2)
    response = _login("dora", "pw-dora")
    assert response.status_code == 302 and response.logged_in


def test_a_successful_login_resets_the_count(dora):
    _fail("dora", 4)
    assert _login("dora", "pw-dora").logged_in
    assert _fail("dora", 4) == [200] * 4
    assert _login("dora", "pw-dora").logged_in
