"""python manage.py create_api_client NAME [--scopes calls:write calls:read] [--rate 600/min] [--webhook-url URL]
python manage.py create_api_client NAME --rotate | --set-webhook URL | --rotate-webhook-secret

Prints the token once; only its hash is stored. The webhook signing secret is printed when it is drawn.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from triage.models import ApiClient
from triage.services.audit import SystemActor
from triage.services.clients import api_client_create, api_client_rotate
from triage.services.errors import DomainError
from triage.services.webhooks import api_client_rotate_webhook_secret, api_client_set_webhook


class Command(BaseCommand):
    help = "Create an API client for a call-handling system (or --rotate its token) and print the token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--scopes", nargs="+", default=list(ApiClient.ALL_SCOPES), choices=ApiClient.ALL_SCOPES)
        parser.add_argument("--rate", default="", help='throttle rate, e.g. "600/min" (default: the intake rate)')
        parser.add_argument("--rotate", action="store_true", help="issue a new token for an existing client")
        parser.add_argument("--overlap-s", type=float, default=None,
                            help="with --rotate: seconds the old token keeps working (default "
                                 "TRIAGE_API_TOKEN_OVERLAP_S, 24 h; 0: it stops at once)")
        parser.add_argument("--webhook-url", default="", help="http(s) URL for call.triaged/done/failed events")
        parser.add_argument("--set-webhook", metavar="URL", default=None,
                            help='set an existing client\'s webhook URL ("": remove it)')
        parser.add_argument("--rotate-webhook-secret", action="store_true",
                            help="draw a new webhook signing secret for an existing client and print it")

    def handle(self, *args: Any, name: str, scopes: list[str], rate: str, rotate: bool, webhook_url: str,
               set_webhook: str | None, rotate_webhook_secret: bool, overlap_s: float | None = None,
               **options: Any) -> None:
        try:
            if set_webhook is not None or rotate_webhook_secret:
                self._webhook(name, set_webhook, rotate_webhook_secret)
                return
            if rotate:
                client = ApiClient.objects.filter(name=name).first()
                if client is None:
                    raise CommandError(f"no API client named {name!r}")
                issued = api_client_rotate(client=client, actor=SystemActor.MANAGE, overlap_s=overlap_s)
            else:
                issued = api_client_create(name=name, scopes=scopes, throttle_rate=rate, webhook_url=webhook_url,
                                           actor=SystemActor.MANAGE)
        except DomainError as exc:
            raise CommandError(f"{exc.message}: {exc.fields}") from exc
        if issued.client.webhook_url and not rotate:
            self.stderr.write(f"Webhook {issued.client.webhook_url}, signing secret: {issued.client.webhook_secret}")
        self.stderr.write(f"API client {issued.client.name!r} ({', '.join(issued.client.scopes)}). "
                          "The token is shown once; store it now:")
        if rotate and issued.client.token_previous_until is not None:
            self.stderr.write(f"The previous token works until {issued.client.token_previous_until:%Y-%m-%d %H:%M %Z}.")
        self.stdout.write(issued.token)

    def _webhook(self, name: str, url: str | None, rotate_secret: bool) -> None:
        client = ApiClient.objects.filter(name=name).first()
        if client is None:
            raise CommandError(f"no API client named {name!r}")
        if url is not None:
            api_client_set_webhook(client=client, url=url, actor=SystemActor.MANAGE)
            self.stderr.write(f"Webhook of {name!r}: {client.webhook_url or '(none)'}")
        if rotate_secret:
            api_client_rotate_webhook_secret(client=client, actor=SystemActor.MANAGE)
            self.stderr.write(f"New webhook signing secret of {name!r}:")
            self.stdout.write(client.webhook_secret)
