"""Incidents: calls about one event, linked by the triage worker (judgment/incident_links.py) and confirmed or
split by a dispatcher."""

from __future__ import annotations

from django.db import models


class Incident(models.Model):
    """One event several callers reported. Its calls point to it (``Call.incident``); each keeps its own
    triage, and calls of one protocol share one generated guidance (``Call.guidance_source``)."""

    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Incident {self.pk}"
