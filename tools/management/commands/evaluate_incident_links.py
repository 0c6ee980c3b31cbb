"""How well the link rule finds incidents: the hand-written incidents among unrelated corpus calls.

    manage.py evaluate_incident_links [--json]

``fixtures/evaluation/incidents/incidents.yaml`` was used to set the rule's thresholds (a development set);
``incidents-heldout.yaml`` was written before that (and read after its first measurement);
``incidents-heldout-2.yaml`` was written after the last change and is only measured. Precision: proposed links that join
calls of one incident; recall: incident calls (after each incident's first) linked into their incident."""

from __future__ import annotations

import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from tools.incident_burst import INCIDENTS, evaluate_links, incident_burst

SETS = {"development": INCIDENTS, "held-out": INCIDENTS.with_name("incidents-heldout.yaml"),
        "held-out-2": INCIDENTS.with_name("incidents-heldout-2.yaml")}


class Command(BaseCommand):
    help = "Precision and recall of the linked-calls rule on the incident bursts."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--json", action="store_true", help="one JSON object per set")
        parser.add_argument("--unrelated", type=int, default=80, help="unrelated corpus calls around the incidents")

    def handle(self, *args: object, **options: object) -> None:
        for name, path in SETS.items():
            score = evaluate_links(incident_burst(unrelated=options["unrelated"], incidents=path))
            if options["json"]:
                self.stdout.write(json.dumps({"set": name, **asdict(score)}))
                continue
            wrong = sorted(f"{a}->{b}" for a, b in score.links.items() if a[0] != b[0] or a.startswith("u"))
            self.stdout.write(f"{name:12} links {score.proposed:3}  correct {score.correct:3}  of {score.linkable:3}  "
                              f"precision {score.precision:.3f}  recall {score.recall:.3f}"
                              f"{'  wrong: ' + ' '.join(wrong) if wrong else ''}")
