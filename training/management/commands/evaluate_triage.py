"""Score the trained triage predictors on the independently written evaluation sets, and the reading of calls on
the findings sets. No database needed.

    python manage.py evaluate_triage                      # every set, a table
    python manage.py evaluate_triage --json               # the metrics, for BENCHMARKS.md
    python manage.py evaluate_triage --sets independent --findings-sets '' \
        --urgency-errors fixtures/evaluation/urgency-errors-independent.json   # the simulator's error model
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = ("ESI and protocol metrics of the trained predictors on fixtures/evaluation/{independent-3,independent-2,"
            "independent,development}, with CPU time per call; asserted findings on fixtures/evaluation/{findings,"
            "findings-development}.")
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--predictors", type=Path, help="trained bundle (default: TRIAGE['PREDICTORS_DIR'])")
        parser.add_argument("--sets", default=",".join(_esi_sets()), help="comma-separated evaluation sets")
        parser.add_argument("--findings-sets", default=",".join(_findings_sets()),
                            help="comma-separated findings sets ('' for none)")
        parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
        parser.add_argument("--urgency-errors", type=Path, metavar="FILE",
                            help="also write the verdicts on --sets per true level, for the simulator "
                                 "(scheduler.workloads.UrgencyErrorModel)")

    def handle(self, *args: Any, **options: Any) -> None:
        import torch

        from judgment.predictors import PredictorsNotBuilt, load_triage_predictor
        from training.predictors import pipeline as training

        try:
            predictor = load_triage_predictor(options["predictors"] or settings.TRIAGE["PREDICTORS_DIR"])
        except PredictorsNotBuilt as error:
            raise CommandError(str(error)) from error
        torch.set_num_threads(1)  # as the Celery triage worker runs it
        predictor.predict(["warm-up call"])
        family_of = training.protocol_families()
        results, verdicts = {}, Counter()
        for name in options["sets"].split(","):
            if name not in training.EVALUATION_SETS:
                raise CommandError(f"--sets: unknown set {name!r} (known: {', '.join(training.EVALUATION_SETS)})")
            records = training.evaluation_set(name, training.FULL)
            started = time.process_time()
            predictions = training.predict_records(predictor, records, chunk=32)
            cpu_ms = (time.process_time() - started) * 1000 / max(1, len(records))
            results[name] = {**training.evaluate(predictions, records, family_of), "cpu_ms_per_call": round(cpu_ms, 1)}
            verdicts.update((int(r["esi"]), p.esi, p.alternative_esi if p.uncertain else None)
                            for r, p in zip(records, predictions, strict=True))
        if options["urgency_errors"]:
            _write_urgency_errors(options["urgency_errors"], options["sets"], predictor.version, verdicts)
        findings = {name: _findings_metrics(name, predictor.catalogue)
                    for name in filter(None, options["findings_sets"].split(","))}
        report = {"version": predictor.version, "catalogue": predictor.catalogue_version, "sets": results,
                  "findings": findings}
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
            return
        self.stdout.write(f"predictors {predictor.version}, catalogue {predictor.catalogue_version}")
        self.stdout.write("set          n   exact  under  over   ESI-1 recall  decision point  uncertain  "
                          "protocol right/unclear/wrong  CPU ms/call")
        for name, r in results.items():
            esi, protocol = r["esi"], r["protocol"]
            self.stdout.write(
                f"{name:<12} {esi['n']:<3} {esi['accuracy']:.3f}  {esi['under_triage_rate']:.3f}  "
                f"{esi['over_triage_rate']:.3f}  {esi['per_level']['1']['recall']:.3f}         "
                f"{r.get('decision_point', {}).get('agreement', 0):.3f}           {r['uncertain_rate']:.3f}      "
                f"{protocol['right']:.3f}/{protocol['unclear']:.3f}/{protocol['wrong_confident']:.3f}"
                f"            {r['cpu_ms_per_call']}"
            )
        if findings:
            self.stdout.write("findings set          calls  precision  recall  assertion accuracy  contradictions")
        for name, f in findings.items():
            self.stdout.write(f"{name:<21} {f['calls']:<6} {f['precision']:.3f}      {f['recall']:.3f}   "
                              f"{f['assertion_accuracy']:.3f}               {f['calls_with_contradictions']}")


def _write_urgency_errors(path: Path, sets: str, version: str, verdicts: Counter) -> None:
    rows = [{"true": true, "level": level, "alternative": alternative, "calls": n}
            for (true, level, alternative), n in sorted(verdicts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0))]
    data = {"source": f"evaluate_triage --sets {sets}", "predictors": version,
            "note": "per true ESI level: the level the classifier gave and, when uncertain, the other level it named",
            "verdicts": rows}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _esi_sets() -> tuple[str, ...]:
    from training.predictors import pipeline as training

    return training.EVALUATION_SETS


def _findings_sets() -> tuple[str, ...]:
    from training.predictors import pipeline as training

    return training.FINDINGS_SETS


def _findings_metrics(name: str, catalogue: Any) -> dict[str, Any]:
    from training.findings_evaluation import FINDINGS_SET
    from training.predictors import pipeline as training

    if not (FINDINGS_SET.parent / name).is_dir():
        raise CommandError(f"--findings-sets: no findings set {name!r} under {FINDINGS_SET.parent}")
    started = time.process_time()
    scored = training.evaluate_findings(name, catalogue)
    return {**scored, "cpu_ms_per_call": round((time.process_time() - started) * 1000 / max(1, scored["calls"]), 1)}
