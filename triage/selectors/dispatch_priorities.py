"""The dispatch-priority table as the API, the events and the board read it (triage/dispatch_priority.py)."""

from __future__ import annotations

from triage.dispatch_priority import DispatchPriority, DispatchPriorityTable
from triage.models import Call, DispatchPriorityRule


def dispatch_priority_table() -> DispatchPriorityTable:
    return DispatchPriorityTable(DispatchPriorityRule.objects.all())


def call_dispatch_priority(call: Call, *, table: DispatchPriorityTable | None = None) -> DispatchPriority | None:
    """The rule for the call's effective level; the decision point counts only while the level is the
    assessment's own (a dispatcher's override set it otherwise), the protocol whichever was selected."""
    assessment = getattr(call, "assessment", None)
    decision_point = protocol = ""
    if assessment is not None:
        decision_point = assessment.decision_point if assessment.override_esi is None else ""
        protocol = assessment.protocol
    return (table or dispatch_priority_table()).match(level=call.level, decision_point=decision_point,
                                                      protocol=protocol)
