"""The dispatch centre's answer in its own terms: a priority code, a response mode and the units to send, for a
call's ESI level, narrowed where the centre wants by the decision point that set the level and by the protocol.

ESI is an emergency department's scale (decision point C counts hospital resources); a CAD dispatches by its
own priority and response mode. The centre's medical director keeps the table in the admin
(``DispatchPriorityRule``); ``fixtures/default_dispatch_priorities.json`` is the starting point shipped. The
most specific rule wins: level + decision point + protocol, then level + protocol, then level + decision
point, then the level alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

RESOURCE_KEYS = {"unit", "count", "lights_and_sirens"}


class ResponseMode(models.TextChoices):
    HOT = "hot", "hot: lights and sirens"
    COLD = "cold", "cold: no lights and sirens"
    NONE = "none", "no vehicle: advice or referral"


def validate_protocol_id(value: str) -> None:
    """Empty (any protocol) or an id of the protocol library (fixtures/guidance/protocols/)."""
    from judgment.protocols import load_library

    known = load_library().protocols
    if value and value not in known:
        raise ValidationError(f"{value!r} is not a protocol of the library; one of: {', '.join(sorted(known))}")


def validate_resources(value: Any) -> None:  # noqa: ANN401 - the JSON as stored
    """A list of ``{"unit": str, "count": int >= 1, "lights_and_sirens": bool}``."""
    if not isinstance(value, list):
        raise ValidationError("A list of units, e.g. [{\"unit\": \"ALS\", \"count\": 1, \"lights_and_sirens\": true}]")
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != RESOURCE_KEYS:
            raise ValidationError(f"Unit {i + 1}: exactly the keys unit, count and lights_and_sirens")
        if not isinstance(item["unit"], str) or not item["unit"].strip():
            raise ValidationError(f"Unit {i + 1}: unit is a name, e.g. ALS, BLS, fire, police")
        if isinstance(item["count"], bool) or not isinstance(item["count"], int) or item["count"] < 1:
            raise ValidationError(f"Unit {i + 1}: count is a whole number, at least 1")
        if not isinstance(item["lights_and_sirens"], bool):
            raise ValidationError(f"Unit {i + 1}: lights_and_sirens is true or false")


@dataclass(frozen=True)
class Resource:
    unit: str
    count: int
    lights_and_sirens: bool


@dataclass(frozen=True)
class DispatchPriority:
    """What the table says for one call, and the rule that said it."""

    priority_code: str
    response_mode: str
    resources: tuple[Resource, ...]
    rule_id: int
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"priority_code": self.priority_code, "response_mode": self.response_mode,
                "resources": [vars(r) for r in self.resources], "rule_id": self.rule_id, "note": self.note}


class DispatchPriorityTable:
    """The rules in memory (a few dozen rows): one read answers a whole list of calls."""

    def __init__(self, rules: Iterable[Any]) -> None:
        self._by_key = {(r.esi_level, r.decision_point, r.protocol): r for r in rules}

    def match(self, *, level: int | None, decision_point: str = "", protocol: str = "") -> DispatchPriority | None:
        if level is None:
            return None
        for key in ((level, decision_point, protocol), (level, "", protocol), (level, decision_point, ""),
                    (level, "", "")):
            rule = self._by_key.get(key)
            if rule is not None:
                return DispatchPriority(
                    priority_code=rule.priority_code, response_mode=rule.response_mode,
                    resources=tuple(Resource(**item) for item in rule.resources), rule_id=rule.pk, note=rule.note)
        return None
