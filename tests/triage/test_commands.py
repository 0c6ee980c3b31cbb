import io

import pytest
from django.core.management import CommandError, call_command

from triage.models import ApiClient
from triage.selectors.clients import api_client_for_token

pytestmark = pytest.mark.django_db


def _run(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_client", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_create_api_client_prints_a_working_token_once_and_stores_its_hash():
    token, note = _run("cad-north", "--scopes", "calls:write")
    client = ApiClient.objects.get(name="cad-north")
    assert api_client_for_token(token) == client and client.scopes == ["calls:write"]
    assert token not in client.token_hash and "shown once" in note


def test_rotate_prints_a_new_token_and_the_old_one_works_until_its_overlap_ends():
    old, _ = _run("cad-south")
    new, note = _run("cad-south", "--rotate")
    assert new != old and api_client_for_token(old) is not None and api_client_for_token(new) is not None
    assert "previous token works until" in note
    newest, _ = _run("cad-south", "--rotate", "--overlap-s", "0")
    assert api_client_for_token(new) is None and api_client_for_token(newest) is not None


def test_a_duplicate_name_is_a_command_error():
    _run("cad-east")
    with pytest.raises(CommandError):
        _run("cad-east")


def test_a_webhook_is_set_with_the_client_and_its_secret_rotated_on_demand():
    _, note = _run("cad-west", "--webhook-url", "https://cad-west.example.org/hooks")
    client = ApiClient.objects.get(name="cad-west")
    assert client.webhook_url == "https://cad-west.example.org/hooks" and client.webhook_secret in note
    secret, _ = _run("cad-west", "--rotate-webhook-secret")
    client.refresh_from_db()
    assert secret == client.webhook_secret and secret not in note
    _run("cad-west", "--set-webhook", "")
    client.refresh_from_db()
    assert client.webhook_url == ""


def test_a_webhook_url_that_is_not_http_is_a_command_error():
    _run("cad-ftp")
    with pytest.raises(CommandError, match="webhook_url"):
        _run("cad-ftp", "--set-webhook", "ftp://cad.example.org/hooks")
