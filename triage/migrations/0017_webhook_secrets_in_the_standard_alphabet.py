"""Webhook secrets drawn before Standard Webhooks were ``whsec_`` + URL-safe base64 without padding. The
Standard Webhooks libraries decode the standard alphabet: the Python one drops ``-`` and ``_`` and then fails
on about one secret in four (41 characters left), and where it does not fail it keys with other bytes than the
receiver meant. Rewrite each such secret as the standard base64 of the same 32 bytes, so every library on
either side derives the same key; the receiver takes the secret the client's page now shows (the old one with
``-`` → ``+``, ``_`` → ``/`` and ``=`` padding)."""

import base64
import binascii

from django.db import migrations

PREFIX = "whsec_"


def standard_alphabet(secret: str) -> str:
    """``secret`` in the standard base64 alphabet with padding; unchanged where it already is, or is not ours."""
    if not secret.startswith(PREFIX):
        return secret
    encoded = secret[len(PREFIX):]
    try:
        base64.b64decode(encoded, validate=True)
        return secret
    except binascii.Error:
        pass
    try:
        key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return secret
    return PREFIX + base64.b64encode(key).decode()


def rewrite_secrets(apps, schema_editor):
    ApiClient = apps.get_model("triage", "ApiClient")
    for client in ApiClient.objects.exclude(webhook_secret="", webhook_secret_previous=""):
        current = standard_alphabet(client.webhook_secret)
        previous = standard_alphabet(client.webhook_secret_previous)
        if (current, previous) != (client.webhook_secret, client.webhook_secret_previous):
            client.webhook_secret, client.webhook_secret_previous = current, previous
            client.save(update_fields=["webhook_secret", "webhook_secret_previous"])


class Migration(migrations.Migration):

    dependencies = [
        ('triage', '0016_api_client_previous_webhook_secret'),
    ]

    operations = [
        migrations.RunPython(rewrite_secrets, migrations.RunPython.noop),
    ]
