"""`manage.py sweep_alive [--max-age S]`: exit 0 when the recovery sweep ran in the last S seconds (default:
four sweep intervals), 1 otherwise: beat's healthcheck. Beat itself writes its schedule file only every few
minutes, so that file's age said nothing about whether it still schedules (issue 32)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Exit 0 when the recovery sweep ran recently (beat schedules it, a worker runs it), else 1."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-age", type=float, default=None, help="seconds (default: 4 sweep intervals)")

    def handle(self, *args: Any, **options: Any) -> None:
        from triage.services.recovery import sweep_age_s

        interval = settings.CELERY_BEAT_SCHEDULE["sweep-stuck-calls"]["schedule"]
        limit = options["max_age"] if options["max_age"] is not None else 4 * float(interval)
        age = sweep_age_s()
        if age is None or age > limit:
            raise CommandError(f"the recovery sweep last ran {'never' if age is None else f'{age} s ago'} "
                               f"(limit {limit:g} s): is beat running, and a worker on its queue?")
        self.stdout.write(f"the recovery sweep ran {age} s ago")
