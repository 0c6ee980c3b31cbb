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


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_behind_the_proxy_a_lockout_holds_the_client_address_not_the_proxys(make_user, tmp_path):
    """Real HTTP to daphne started as compose starts it (--proxy-headers): every request comes from the proxy's
    address, the client's in X-Forwarded-For."""
    import http.cookiejar
    import os
    import re
    import urllib.error
    import urllib.parse
    import urllib.request

    from tests.fixtures.services import database_url_for_test_db
    from tools.stack import Stack, free_port

    make_user("dora", "dispatcher")
    port = free_port()
    stack = Stack(env={**os.environ, "DATABASE_URL": database_url_for_test_db(), "DATABASE_CONN_MAX_AGE": "0"},
                  log_dir=tmp_path)

    def login(password: str, client: str) -> int | str:
        """429 when refused, "in" when logged in (redirected to the board), 200 for the form again."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        headers = {"X-Forwarded-For": client}
        form = opener.open(urllib.request.Request(f"http://127.0.0.1:{port}{LOGIN}", headers=headers)).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
        body = urllib.parse.urlencode({"username": "dora", "password": password, "csrfmiddlewaretoken": token})
        request = urllib.request.Request(f"http://127.0.0.1:{port}{LOGIN}", data=body.encode(), headers=headers)
        try:
            response = opener.open(request)
        except urllib.error.HTTPError as error:
            return error.code
        return response.status if LOGIN in response.geturl() else "in"

    try:
        stack.start_web(port)
        assert [login("wrong-password", HERE) for _ in range(5)] == [200] * 4 + [429]
        assert login("pw-dora", HERE) == 429  # this client is locked out
        assert login("pw-dora", ELSEWHERE) == "in"  # another dispatcher behind the same proxy is not
    finally:
        stack.stop_all()
