"""Dashboard pages and the board's actions. Thin: validate a form, call one service, render.

Actions are POSTs (CSRF-checked by Django's middleware). htmx posts get a small HTML fragment back
(its status code says whether it worked); plain form posts are redirected (PRG) or re-rendered
with errors. The board itself updates through its socket, not through these responses.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from triage.forms import (
    OUTCOME_SUGGESTIONS,
    AssignForm,
    CancelForm,
    CloseForm,
    ConfirmLevelForm,
    OverrideForm,
    ProtocolForm,
    SearchForm,
)
from triage.models import FINAL_STATUSES, SWITCHABLE_STATUSES, Call, CallStatus
from triage.roles import has_any_role, is_dispatcher, is_supervisor
from triage.selectors.calls import incident_calls
from triage.selectors.dispatch_priorities import call_dispatch_priority
from triage.selectors.queue import board_vocabulary, is_live, protocol_choices, protocol_state
from triage.services.assignments import call_assign, call_claim, dispatchers
from triage.services.board import call_acknowledge, call_close
from triage.services.calls import call_cancel
from triage.services.errors import DomainError
from triage.services.incidents import call_incident_confirm, call_incident_split
from triage.services.overrides import call_confirm_level, call_override_level
from triage.services.protocols import call_switch_protocol
from triage.services.recovery import call_retry

SEARCH_PAGE_SIZE = 50


def _require_board_role(request: HttpRequest) -> None:
    if not has_any_role(request.user):
        raise PermissionDenied("Your account has no dispatch-centre role.")


def _call_context(request: HttpRequest, call: Call) -> dict:
    return {
        "call": call,
        "assessment": getattr(call, "assessment", None),  # None when not triaged yet
        "protocol": protocol_state(getattr(call, "assessment", None)),
        "dispatch_priority": call_dispatch_priority(call),
        "live": is_live(call),
        "can_act": is_dispatcher(request.user),
        "can_override": call.status not in FINAL_STATUSES,
        "can_confirm_level": call.status not in FINAL_STATUSES and getattr(call, "assessment", None) is not None
        and call.assessment.awaiting_confirmation,
        "can_cancel": call.is_active,
        "can_retry": call.status == CallStatus.FAILED and getattr(call, "assessment", None) is not None,
        "can_close": call.status in FINAL_STATUSES and call.closed_at is None,
        "can_claim": call.closed_at is None and call.assigned_to_id is None,
        "can_release": call.closed_at is None and call.assigned_to_id == request.user.pk,
        "can_assign": call.closed_at is None and is_supervisor(request.user),
        "assignable": dispatchers() if is_supervisor(request.user) else [],
        "incident_calls": incident_calls(call),
        "override_form": OverrideForm(initial={"level": call.level}),
        "can_switch_protocol": call.status in SWITCHABLE_STATUSES and getattr(call, "assessment", None) is not None,
        "protocol_choices": protocol_choices(),
        "close_form": CloseForm(),
        "cancel_form": CancelForm(),
        "outcome_suggestions": OUTCOME_SUGGESTIONS,
    }


def _get_call(pk: int) -> Call:
    return get_object_or_404(Call.objects.select_related("tier", "assessment", "acknowledged_by", "assigned_to",
                                                         "incident_confirmed_by"), pk=pk)


@login_required
@require_GET
def board(request: HttpRequest) -> HttpResponse:
    _require_board_role(request)
    return render(
        request,
        "triage/board.html",
        {"can_act": is_dispatcher(request.user), "is_supervisor": is_supervisor(request.user),
         "vocabulary": board_vocabulary(), "centre_time_zone": settings.TIME_ZONE},
    )


@login_required
@require_GET
def call_detail(request: HttpRequest, pk: int) -> HttpResponse:
    _require_board_role(request)
    call = _get_call(pk)
    context = _call_context(request, call)
    context["audit_events"] = call.audit_events.select_related("actor_user").order_by("created_at", "id")
    return render(request, "triage/call_detail.html", context)


@login_required
@require_GET
def call_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The board's side panel for the selected call (an htmx fragment)."""
    _require_board_role(request)
    return render(request, "triage/_call_panel.html", _call_context(request, _get_call(pk)))


@login_required
@require_GET
def call_search(request: HttpRequest) -> HttpResponse:
    _require_board_role(request)
    form = SearchForm(request.GET or None)
    calls = Call.objects.select_related("tier").order_by("-created_at")
    if form.is_valid():
        data = form.cleaned_data
        if data["q"]:
            q = data["q"].strip()
            calls = calls.filter(
                Q(transcript__icontains=q)
                | Q(external_id__icontains=q)
                | Q(location_address__icontains=q)
                | Q(outcome__icontains=q)
                | Q(caller_name__icontains=q)
            )
        if data["status"]:
            calls = calls.filter(status=data["status"])
        if data["level"]:
            calls = calls.filter(level=data["level"])
        if data["closed"] == "yes":
            calls = calls.filter(closed_at__isnull=False)
        elif data["closed"] == "no":
            calls = calls.filter(closed_at__isnull=True)
    page = Paginator(calls, SEARCH_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "triage/call_search.html", {"form": form, "page": page, "query": query.urlencode()})


def login_locked_out(request: HttpRequest, *_: object) -> HttpResponse:
    """django-axes' answer to a login from a locked-out username and address (AXES_LOCKOUT_CALLABLE)."""
    cool_off = settings.AXES_COOLOFF_TIME
    minutes = -(-int(cool_off.total_seconds()) // 60) if cool_off else None
    return render(request, "registration/locked_out.html", {"cool_off_minutes": minutes},
                  status=settings.AXES_HTTP_RESPONSE_CODE)


# --- actions -------------------------------------------------------------------------------------


def _safe_next(request: HttpRequest, *, fallback: str) -> str:
    """The form's ``next`` when it stays on this site (same host, no scheme change), else ``fallback``.

    Django's check also refuses scheme-relative (``//evil.example``), backslash (``/\\evil.example``) and
    control-character tricks that browsers would read as another host.
    """
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _action(
    request: HttpRequest, pk: int, form_class: Callable | None, perform: Callable[[Call, dict], str]
) -> HttpResponse:
    if not is_dispatcher(request.user):
        raise PermissionDenied("Only dispatchers and supervisors may act on calls.")
    call = _get_call(pk)
    form = form_class(request.POST) if form_class else None
    status, message, ok = 200, "", True
    if form is not None and not form.is_valid():
        status, ok = 400, False
        message = "; ".join(f"{form.fields[f].label if f in form.fields else f}: {' '.join(e)}"
                            for f, e in form.errors.items())
    else:
        try:
            message = perform(call, form.cleaned_data if form is not None else {})
        except DomainError as exc:
            status, ok = exc.status_code, False
            message = exc.message
    if _is_htmx(request):
        return render(
            request, "triage/_action_result.html", {"ok": ok, "message": message, "call_id": call.pk}, status=status
        )
    if ok:
        messages.success(request, message)
        return redirect(_safe_next(request, fallback=reverse("call-detail", args=[call.pk])))
    context = _call_context(request, _get_call(pk))
    context["action_error"] = message
    context["audit_events"] = call.audit_events.select_related("actor_user").order_by("created_at", "id")
    return render(request, "triage/call_detail.html", context, status=status)


@login_required
@require_POST
def call_override(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_override_level(
            call=call, level=data["level"], reason=data["reason"], user=request.user,
            disputed_reason=data.get("disputed_reason", ""),
        )
        return f"Call {call.pk} is now ESI {data['level']}."

    return _action(request, pk, OverrideForm, perform)


@login_required
@require_POST
def call_confirm_level_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_confirm_level(call=call, level=data["level"], user=request.user)
        return f"Call {call.pk}: ESI {data['level']} confirmed."

    return _action(request, pk, ConfirmLevelForm, perform)


@login_required
@require_POST
def call_acknowledge_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_acknowledge(call=call, user=request.user)
        return f"Call {call.pk} acknowledged."

    return _action(request, pk, None, perform)


@login_required
@require_POST
def call_close_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_close(call=call, user=request.user, outcome=data["outcome"])
        return f"Call {call.pk} closed: {data['outcome']}."

    return _action(request, pk, CloseForm, perform)


@login_required
@require_POST
def call_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_cancel(call=call, actor=request.user, reason=data.get("reason", ""))
        return f"Call {call.pk} cancelled."

    return _action(request, pk, CancelForm, perform)


@login_required
@require_POST
def call_retry_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_retry(call=call, actor=request.user)
        return f"Call {call.pk} is generated again at its place in the queue."

    return _action(request, pk, None, perform)


@login_required
@require_POST
def call_protocol_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_switch_protocol(call=call, protocol=data["protocol"], user=request.user)
        return f"Call {call.pk} now follows {dict(protocol_choices())[data['protocol']]}; its guidance is generated again."

    return _action(request, pk, lambda post: ProtocolForm(post, choices=protocol_choices()), perform)


@login_required
@require_POST
def call_claim_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_claim(call=call, user=request.user)
        return f"You work call {call.pk}."

    return _action(request, pk, None, perform)


@login_required
@require_POST
def call_assign_view(request: HttpRequest, pk: int) -> HttpResponse:
    people = {user.pk: user for user in dispatchers()}

    def perform(call: Call, data: dict) -> str:
        to = people.get(data["assigned_to"]) if data.get("assigned_to") else None
        call_assign(call=call, to=to, by=request.user)
        return f"Call {call.pk} is worked by {to.get_username()}." if to else f"Nobody works call {call.pk} now."

    choices = [(pk_, user.get_username()) for pk_, user in people.items()]
    return _action(request, pk, lambda post: AssignForm(post, choices=choices), perform)


@login_required
@require_POST
def call_link_confirm_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_incident_confirm(call=call, user=request.user)
        return f"Call {call.pk} is confirmed as part of incident {call.incident_id}."

    return _action(request, pk, None, perform)


@login_required
@require_POST
def call_link_split_view(request: HttpRequest, pk: int) -> HttpResponse:
    def perform(call: Call, data: dict) -> str:
        call_incident_split(call=call, user=request.user)
        return f"Call {call.pk} is split from its incident; its guidance is its own."

    return _action(request, pk, None, perform)
