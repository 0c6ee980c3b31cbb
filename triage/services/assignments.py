"""Who works a call: a dispatcher claims it, a supervisor assigns it (or takes it back), shown on every board.

A claim says "I have this one" to the rest of the floor, so two dispatchers do not talk the same caller through
the same protocol. Taking over another dispatcher's call is a supervisor's decision (assign), not a race.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from triage.models import AuditAction, Call
from triage.realtime import call_changed_on_commit
from triage.roles import is_dispatcher, is_supervisor

from .audit import audit_record
from .errors import Conflict, NotAllowed, field_error


def call_claim(*, call: Call, user: AbstractBaseUser) -> Call:
    """``user`` works ``call`` from now on; a dispatcher's own claim, refused while another holds it."""
    if not is_dispatcher(user):
        raise NotAllowed("only dispatchers and supervisors may claim a call")
    with transaction.atomic():
        locked = _locked_open_call(call)
        if locked.assigned_to_id == user.pk:
            return locked
        if locked.assigned_to_id is not None:
            raise Conflict(f"call {locked.pk} is being worked by {locked.assigned_to.get_username()}; a supervisor "
                           f"can reassign it", fields={"assigned_to": ["claimed by another dispatcher"]})
        _assign(locked, user, by=user)
    return locked


def call_assign(*, call: Call, to: AbstractBaseUser | None, by: AbstractBaseUser) -> Call:
    """A supervisor gives ``call`` to dispatcher ``to`` (None: nobody works it now); the holder may also let
    it go (``to=None``)."""
    releasing_own = to is None and call.assigned_to_id == by.pk
    if not (is_supervisor(by) or (releasing_own and is_dispatcher(by))):
        raise NotAllowed("only a supervisor assigns calls (a dispatcher may release their own)")
    if to is not None and not is_dispatcher(to):
        raise field_error("assigned_to", f"{to.get_username()} has no dispatcher role")
    with transaction.atomic():
        locked = _locked_open_call(call)
        if locked.assigned_to_id != (to.pk if to else None):
            _assign(locked, to, by=by)
    return locked


def dispatchers() -> list[AbstractBaseUser]:
    """The users a supervisor may assign a call to, by name."""
    users = get_user_model().objects.filter(is_active=True).order_by(get_user_model().USERNAME_FIELD)
    return [user for user in users.prefetch_related("groups") if is_dispatcher(user)]


def _locked_open_call(call: Call) -> Call:
    locked = Call.objects.select_for_update(of=("self",)).select_related("assigned_to").get(pk=call.pk)
    if locked.closed_at is not None:
        raise Conflict(f"call {locked.pk} is closed", fields={"assigned_to": ["the call is closed"]})
    return locked


def _assign(locked: Call, to: AbstractBaseUser | None, *, by: AbstractBaseUser) -> None:
    previous = locked.assigned_to.get_username() if locked.assigned_to_id else None
    locked.assigned_to, locked.assigned_at = to, timezone.now() if to else None
    locked.save(update_fields=["assigned_to", "assigned_at"])
    audit_record(action=AuditAction.CALL_ASSIGNED, actor=by, call=locked,
                 data={"from": previous, "to": to.get_username() if to else None})
    call_changed_on_commit(locked.pk)
