import pytest
from django.utils import timezone

from triage.api_tokens import token_hash
from triage.models import ApiClient, AuditEvent
from triage.selectors.clients import api_client_for_token
from triage.services.clients import api_client_create, api_client_deactivate, api_client_rotate
from triage.services.errors import DomainError

pytestmark = pytest.mark.django_db


def test_only_a_hash_of_the_token_is_stored():
    issued = api_client_create(name="cad", actor="system:test")
    stored = ApiClient.objects.get(pk=issued.client.pk)
    assert issued.token not in (stored.token_hash, stored.token_prefix)
    assert stored.token_hash == token_hash(issued.token) and issued.token.startswith(f"trg_{stored.token_prefix}_")
    assert AuditEvent.objects.filter(action="api_client.created").exists()


def test_a_token_finds_its_client_and_nothing_else():
    issued = api_client_create(name="cad", actor="system:test")
    assert api_client_for_token(issued.token) == issued.client
    assert api_client_for_token(issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")) is None
    assert api_client_for_token("trg_nothing") is None and api_client_for_token("") is None


def test_after_a_rotation_both_tokens_work_until_the_overlap_ends_then_only_the_new_one():
    issued = api_client_create(name="cad", actor="system:test")
    rotated = api_client_rotate(client=issued.client, actor="system:test")
    assert api_client_for_token(issued.token) == issued.client == api_client_for_token(rotated.token)
    ApiClient.objects.filter(pk=issued.client.pk).update(token_previous_until=timezone.now())  # the overlap ends
    assert api_client_for_token(issued.token) is None and api_client_for_token(rotated.token) == issued.client
    again = api_client_rotate(client=ApiClient.objects.get(pk=issued.client.pk), actor="system:test")
    assert api_client_for_token(issued.token) is None  # a token two rotations old never works again
    assert api_client_for_token(rotated.token) == issued.client == api_client_for_token(again.token)


def test_a_rotation_without_overlap_retires_the_old_token_at_once():
    issued = api_client_create(name="cad", actor="system:test")
    rotated = api_client_rotate(client=issued.client, actor="system:test", overlap_s=0)
    assert api_client_for_token(issued.token) is None and api_client_for_token(rotated.token) == issued.client


def test_a_deactivated_client_is_refused_with_its_previous_token_too():
    issued = api_client_create(name="cad", actor="system:test")
    rotated = api_client_rotate(client=issued.client, actor="system:test")
    api_client_deactivate(client=rotated.client, actor="system:test")
    assert api_client_for_token(issued.token) is None and api_client_for_token(rotated.token) is None


def test_a_deactivated_client_is_refused():
    issued = api_client_create(name="cad", actor="system:test")
    api_client_deactivate(client=issued.client, actor="system:test")
    assert api_client_for_token(issued.token) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"name": " "}, "name"), ({"name": "c", "scopes": ["calls:admin"]}, "scopes"), ({"name": "c", "throttle_rate": "lots"}, "throttle_rate")],
)
def test_invalid_client_settings_name_the_field(kwargs, field):
    with pytest.raises(DomainError) as error:
        api_client_create(actor="system:test", **kwargs)
    assert field in error.value.fields


def test_client_names_are_unique():
    api_client_create(name="cad", actor="system:test")
    with pytest.raises(DomainError) as error:
        api_client_create(name="cad", actor="system:test")
    assert "name" in error.value.fields
