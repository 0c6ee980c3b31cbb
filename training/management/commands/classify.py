"""Classify transcripts offline: JSONL {"id", "transcript"} in, one JSON prediction per line out. No database."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

CHUNK = 64


def parse_lines(lines: Iterable[str], source: str) -> list[tuple[Any, str]]:
    """(id, transcript) per non-blank line; a CommandError names the first bad line."""
    calls = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise CommandError(f"{source}: line {number}: not valid JSON ({error.msg})") from error
        if not isinstance(row, dict) or "id" not in row:
            raise CommandError(f'{source}: line {number}: expected an object with "id" and "transcript"')
        if not isinstance(row.get("transcript"), str) or not row["transcript"].strip():
            raise CommandError(f'{source}: line {number}: "transcript" must be a non-empty string')
        calls.append((row["id"], row["transcript"]))
    return calls


def protocol_json(choice: Any, library: Any) -> dict[str, Any] | None:
    """The selection as ``classify`` prints it: the protocol's library version, confidence and runner-up."""
    if choice is None:
        return None
    return {"id": choice.protocol, "version": library.version_of(choice.protocol),
            "confidence": round(choice.confidence, 4), "runner_up": choice.runner_up,
            "likeliest": choice.likeliest}


class Command(BaseCommand):
    help = (
        'Print {"id", "esi", "decision_point", "reasons", "uncertain", "alternative_esi", "findings", "protocol", "probabilities", '
        '"predicted_output_tokens"} per line of a JSONL file ("-": stdin); "protocol" is {"id", "version", '
        '"confidence", "runner_up"}, id "unclear" below the selector\'s confidence threshold.'
    )
    requires_system_checks: list[str] = []  # never touches the database

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help='JSONL file of {"id", "transcript"} lines, or - for stdin')
        parser.add_argument("--predictors", type=Path, help="trained bundle (default: TRIAGE_PREDICTORS_DIR)")

    def handle(self, *args: Any, **options: Any) -> None:
        from judgment.predictors import PredictorsNotBuilt, load_triage_predictor
        from judgment.protocols import load_library

        calls = self._read(options["file"])
        directory = options["predictors"] or os.environ.get("TRIAGE_PREDICTORS_DIR")
        if not directory:
            from django.conf import settings

            directory = settings.TRIAGE["PREDICTORS_DIR"]
        try:
            predictor = load_triage_predictor(directory)
        except PredictorsNotBuilt as error:
            raise CommandError(str(error)) from error
        library = load_library()
        for start in range(0, len(calls), CHUNK):
            chunk = calls[start : start + CHUNK]
            for (call_id, _), p in zip(chunk, predictor.predict([t for _, t in chunk]), strict=True):
                self.stdout.write(json.dumps({
                    "id": call_id,
                    "esi": p.esi,
                    "decision_point": p.decision_point,
                    "reasons": list(p.reasons),
                    "uncertain": p.uncertain, "alternative_esi": p.alternative_esi,
                    "findings": list(p.findings),
                    "protocol": protocol_json(p.protocol, library),
                    "probabilities": list(p.probabilities),
                    "predicted_output_tokens": p.predicted_output_tokens,
                }))

    def _read(self, name: str) -> list[tuple[Any, str]]:
        if name == "-":
            return parse_lines(sys.stdin, "stdin")
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"{name}: no such file")
        with path.open(encoding="utf-8", errors="strict") as lines:
            try:
                return parse_lines(lines, name)
            except UnicodeDecodeError as error:
                raise CommandError(f"{name}: not UTF-8 text ({error.reason})") from error
