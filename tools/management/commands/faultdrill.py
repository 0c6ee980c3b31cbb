"""`manage.py faultdrill`: a burst of calls with one fault injected mid-burst, per fault (tools/faultdrill.py).

    manage.py faultdrill --calls 300                      # every fault, each in its own run
    manage.py faultdrill --calls 50 --fault inference,redis-restart --json

Exits non-zero when any drill lost or duplicated a call.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from tools.faultdrill import FAULTS, DrillOptions, run_drill


class Command(BaseCommand):
    help = "Inject each fault mid-burst into the real stack; count lost and duplicated calls and recovery time."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--calls", type=int, default=300)
        parser.add_argument("--fault", default="all", help=f"comma-separated, or all: {', '.join(FAULTS)}")
        parser.add_argument("--max-new-tokens", type=int, default=64)
        parser.add_argument("--model", default=None, help="guidance model (default: INFERENCE_MODEL)")
        parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait per drill")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts) -> None:  # noqa: ANN002, ANN003
        faults = list(FAULTS) if opts["fault"] == "all" else [f.strip() for f in opts["fault"].split(",")]
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise CommandError(f"unknown fault(s) {unknown}: choose from {', '.join(FAULTS)}")
        self._prepare()
        options = DrillOptions(calls=opts["calls"], max_new_tokens=opts["max_new_tokens"], model=opts["model"],
                               timeout_s=opts["timeout"], log_dir=Path(settings.VAR_DIR) / "logs" / "faultdrill")
        results = [run_drill(fault, options, log=self.stderr.write) for fault in faults]
        if opts["json"]:
            self.stdout.write(json.dumps([asdict(r) for r in results], indent=1))
        else:
            self.stdout.write("fault                         accepted  done  lost  dup  refused  recovery  drained")
            for r in results:
                self.stdout.write(f"{r.fault:<29} {r.accepted:>8} {r.done:>5} {r.lost:>5} {r.duplicated:>4} "
                                  f"{r.refused_posts:>8} {_seconds_cell(r.recovery_s)} {_seconds_cell(r.drained_s)}")
        failed = [r.fault for r in results if not r.passed]
        if failed:
            raise CommandError(f"calls lost or duplicated under: {', '.join(failed)}")

    def _prepare(self) -> None:
        from django.core.management import call_command

        from triage.models import Tier

        call_command("migrate", verbosity=0)
        if not Tier.objects.exists():
            call_command("loaddata", "fixtures/default_tiers.json", verbosity=0)


def _seconds_cell(seconds: float | None) -> str:
    return f"{seconds:>8.1f}" if seconds is not None else "       -"
