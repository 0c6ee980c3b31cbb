"""The ESI decision points (ESI Implementation Handbook, v4): which question decided a call's level. Defined here
alone; the assessment records one, and the dispatch-priority table may narrow a rule to one."""

from __future__ import annotations

from django.db import models


class DecisionPoint(models.TextChoices):
    """A life-saving intervention, B high risk, C resources, D danger-zone vitals."""

    A = "A", "A: life-saving intervention"
    B = "B", "B: high-risk situation"
    C = "C", "C: resources"
    D = "D", "D: danger-zone vitals"
