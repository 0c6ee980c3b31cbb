"""Production is the default: what an operator gets from the settings with nothing but a key and a host name.

Each test starts manage.py in a process of its own with exactly the environment it names (no
DJANGO_SETTINGS_MODULE: production's config.settings, not the suite's tests.settings).
"""

from __future__ import annotations

import json
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST = "triage.example.org"


def _manage(*args: str, env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
    )


def _production_env() -> dict[str, str]:
    return {"DJANGO_SECRET_KEY": secrets.token_urlsafe(64), "DJANGO_ALLOWED_HOSTS": HOST}


def test_check_deploy_reports_nothing_with_only_a_secret_key_and_allowed_hosts():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", env=_production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout
    assert "WARNING" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "argv",
    [("manage.py", "check"), ("-c", "import config.wsgi")],
    ids=["manage.py", "wsgi-app"],
)
def test_a_start_without_a_secret_key_refuses_naming_the_variable(argv, tmp_path):
    env = {"DJANGO_ALLOWED_HOSTS": HOST, "TRIAGE_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in done.stderr
    assert not (tmp_path / "secret-key").exists()  # no key made up behind the operator's back


def test_the_demo_makes_its_own_secret_key_once_keeps_it_private_and_lends_it_to_nothing_else(tmp_path):
    env = {"TRIAGE_VAR_DIR": str(tmp_path)}
    first = _manage("demo", "--help", env=env)
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "secret-key"
    key = key_file.read_text().strip()
    assert len(key) >= 50 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert _manage("demo", "--help", env=env).returncode == 0
    assert key_file.read_text().strip() == key  # reused: the demo's sessions survive a restart
    refused = _manage("check", env=env)
    assert refused.returncode != 0 and "DJANGO_SECRET_KEY is not set" in refused.stderr


RESPONSE_PROBE = """
import json
from django.test import Client

client = Client()
plain = client.get("/accounts/login/", HTTP_HOST="{host}")
secure = client.get("/accounts/login/", HTTP_HOST="{host}", HTTP_X_FORWARDED_PROTO="https")
print(json.dumps({{
    "debug": __import__("django.conf").conf.settings.DEBUG,
    "plain": [plain.status_code, plain.get("Location")],
    "secure": [secure.status_code, dict(secure.headers)],
    "csrf_cookie_secure": bool(secure.cookies["csrftoken"]["secure"]),
}}))
"""


def test_production_redirects_to_https_and_sends_the_security_headers_behind_a_tls_proxy(tmp_path):
    env = {**_production_env(), "DJANGO_STATIC_ROOT": str(tmp_path / "static")}
    collected = _manage("collectstatic", "--noinput", env=env)  # as the image does at build: hashed names
    assert collected.returncode == 0, collected.stderr
    done = _manage("shell", "-c", RESPONSE_PROBE.format(host=HOST), env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["debug"] is False
    assert seen["plain"] == [301, f"https://{HOST}/accounts/login/"]
    status, headers = seen["secure"]
    assert status == 200
    assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"
    assert seen["csrf_cookie_secure"] is True


def test_a_misspelt_security_switch_is_refused_rather_than_read_as_off():
    env = {**_production_env(), "DJANGO_SECURE_SSL_REDIRECT": "flase"}
    done = _manage("check", env=env)
    assert done.returncode != 0 and "DJANGO_SECURE_SSL_REDIRECT='flase'" in done.stderr
