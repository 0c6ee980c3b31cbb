"""python manage.py create_api_client NAME [--scopes calls:write calls:read] [--rate 600/min] [--rotate]

Prints the token once; only its hash is stored.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from triage.models import ApiClient
from triage.services.clients import api_client_create, api_client_rotate
from triage.services.errors import DomainError


class Command(BaseCommand):
    help = "Create an API client for a call-handling system (or --rotate its token) and print the token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--scopes", nargs="+", default=list(ApiClient.ALL_SCOPES), choices=ApiClient.ALL_SCOPES)
        parser.add_argument("--rate", default="", help='throttle rate, e.g. "600/min" (default: the intake rate)')
        parser.add_argument("--rotate", action="store_true", help="issue a new token for an existing client")

    def handle(self, *args: Any, name: str, scopes: list[str], rate: str, rotate: bool, **options: Any) -> None:
        try:
            if rotate:
                client = ApiClient.objects.filter(name=name).first()
                if client is None:
                    raise CommandError(f"no API client named {name!r}")
                issued = api_client_rotate(client=client, actor="system:manage.py")
            else:
                issued = api_client_create(name=name, scopes=scopes, throttle_rate=rate, actor="system:manage.py")
        except DomainError as exc:
            raise CommandError(f"{exc.message}: {exc.fields}") from exc
        self.stderr.write(f"API client {issued.client.name!r} ({', '.join(issued.client.scopes)}). "
                          "The token is shown once; store it now:")
        self.stdout.write(issued.token)
