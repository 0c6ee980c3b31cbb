"""The API documentation: served offline (no CDN), and the schema states what the server requires."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import yaml
from django.contrib.staticfiles import finders


class _AssetRefs(HTMLParser):
    """Every URL a page loads as a script, stylesheet or icon (plus absolute URLs in inline scripts)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            self._in_script = True
            if values.get("src"):
                self.refs.append(values["src"])
        elif tag == "link" and values.get("href"):
            self.refs.append(values["href"])
        elif tag == "img" and values.get("src"):
            self.refs.append(values["src"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            # e.g. a bundle URL assembled in an inline script
            self.refs += re.findall(r"""["'](https?://[^"']+|//[^"']+)["']""", data)


def _asset_refs(html: str) -> list[str]:
    parser = _AssetRefs()
    parser.feed(html)
    return parser.refs


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_the_docs_pages_load_no_asset_from_another_host(client, page):
    response = client.get(page)
    assert response.status_code == 200
    refs = _asset_refs(response.content.decode())
    assert refs, "the page loads its UI bundle from somewhere"
    external = [ref for ref in refs if re.match(r"^(https?:)?//", ref)]
    assert not external, f"{page} loads assets from another host: {external}"


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_the_docs_assets_are_our_static_files(client, settings, page):
    refs = _asset_refs(client.get(page).content.decode())
    static = [ref for ref in refs if ref.startswith("/" + settings.STATIC_URL.lstrip("/"))]
    assert static, refs
    for ref in static:
        path = ref.split("?")[0].removeprefix("/" + settings.STATIC_URL.lstrip("/"))
        assert finders.find(path), f"{ref} is not a static file we ship"


def _schema(client) -> dict:
    return yaml.safe_load(client.get("/api/schema/").content)


def test_the_schema_says_an_override_needs_esi_with_reason_or_a_protocol(client):
    schema = _schema(client)
    body = schema["paths"]["/api/v1/calls/{call_id}/"]["patch"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    component = schema["components"]["schemas"][ref]
    assert component["anyOf"] == [{"required": ["esi", "reason"]}, {"required": ["protocol"]}]
    assert component["properties"]["reason"]["minLength"] == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [({"esi": 2}, "reason"), ({"reason": "looks worse"}, "esi"), ({}, "esi")],
)
def test_an_override_the_schema_calls_invalid_is_refused_naming_the_field(
    redis_conn, session_api, triaged_call, body, field
):
    response = session_api.patch(f"/api/v1/calls/{triaged_call.pk}/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


@pytest.mark.django_db
def test_the_schema_declares_every_webhook_event_with_the_body_the_receiver_gets(client):
    import uuid
    from datetime import UTC, datetime

    from tests.triage.factories import make_call
    from triage.services.webhooks import WebhookEvent, webhook_payload

    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["openapi"].startswith("3.1") and set(schema["webhooks"]) == {e.value for e in WebhookEvent}
    body = schema["webhooks"]["call.done"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    event = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    call_ref = event["properties"]["call"].get("$ref") or event["properties"]["call"]["allOf"][0]["$ref"]
    declared = set(schema["components"]["schemas"][call_ref.rsplit("/", 1)[-1]]["properties"])
    payload = webhook_payload(call=make_call(), event=WebhookEvent.TRIAGED, event_id=str(uuid.uuid4()),
                              occurred_at=datetime.now(UTC))
    assert set(payload) == set(event["properties"]) and set(payload["call"]) == declared
