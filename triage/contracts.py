"""The typed messages that cross the app's process seams, each built and parsed here alone (as Zulip keeps its
events in ``event_types.py``); ``tests/test_contracts.py`` fails if one is built anywhere else.

- **The inference stream** (services → inference worker, a Redis stream): ``StreamEntry``, one per call that is
  ready to generate. It names the call; its level and predicted length only stand in until the worker has read
  the call from the database.
- **The control channel** (services → inference worker, Redis pub/sub, at most once): ``ConfigChanged``,
  ``Reprioritise``, ``Cancel``, ``Regenerate``.
- **The board** (web process → browser, JSON over the dashboard and call sockets): ``BOARD_EVENTS`` and
  ``CALL_EVENTS`` name each event's fields; the builders below are the only code that makes them, and
  ``static/js/board.js`` handles exactly these types (a test holds the two together).

Call ids are ``int`` on every seam: the database's key. The engine's request ids are strings; the worker
turns one into the other at the engine's edge only (``worker.request_id``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar

from scheduler.config import ESI_LEVELS, UNPREDICTED_OUTPUT_TOKENS, UNTRIAGED_LEVEL

# --- the inference stream ---------------------------------------------------------------------------------


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class StreamEntry:
    """One inference-stream entry: which call is ready, and what the scheduler may use until the worker has read
    the call (its level and predicted length; what to generate is read from the database, never from here).
    Times are Unix seconds: ``accepted_at`` when the intake stored the call (the scheduler's arrival), and
    ``enqueued_at`` when the entry was written."""

    call_id: int
    enqueued_at: float
    accepted_at: float
    level: int = UNTRIAGED_LEVEL
    predicted_output_tokens: int = UNPREDICTED_OUTPUT_TOKENS

    def to_fields(self) -> dict[str, str | int]:
        return {"call_id": self.call_id, "level": self.level, "predicted_output_tokens": self.predicted_output_tokens,
                "enqueued_at": f"{self.enqueued_at:.6f}", "accepted_at": f"{self.accepted_at:.6f}"}

    @classmethod
    def from_fields(cls, raw: Mapping[bytes | str, bytes | str]) -> StreamEntry | None:
        """The entry, or None where it names no call of ours (written by something else); values it lacks or
        cannot be read take the defaults."""
        found = {_text(k): _text(v) for k, v in raw.items()}
        try:
            call_id = int(found["call_id"])
        except (KeyError, ValueError):
            return None
        if call_id <= 0:
            return None

        def number(name: str, default: float, kind: type = int) -> Any:  # noqa: ANN401 - int or float
            try:
                return kind(float(found[name]))
            except (KeyError, ValueError, OverflowError):
                return default

        level = number("level", UNTRIAGED_LEVEL)
        return cls(call_id=call_id, enqueued_at=number("enqueued_at", 0.0, float),
                   accepted_at=number("accepted_at", 0.0, float),
                   level=level if level in ESI_LEVELS else UNTRIAGED_LEVEL,
                   predicted_output_tokens=max(1, number("predicted_output_tokens", UNPREDICTED_OUTPUT_TOKENS)))


# --- the control channel ----------------------------------------------------------------------------------


class ControlKind(StrEnum):
    CONFIG = "config"
    REPRIORITISE = "reprioritise"
    CANCEL = "cancel"
    REGENERATE = "regenerate"


def _positive_int(value: object, name: str) -> int:
    """A JSON integer above 0 (a digit string is read as one); ``ValueError`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    number = int(value)
    if number <= 0:
        raise ValueError(f"{name} must be above 0, got {value!r}")
    return number


@dataclass(frozen=True)
class ConfigChanged:
    """The scheduler settings or tiers changed: the worker reloads them from the database."""

    version: int
    kind: ClassVar[ControlKind] = ControlKind.CONFIG

    def __post_init__(self) -> None:
        object.__setattr__(self, "version", int(self.version))


@dataclass(frozen=True)
class Reprioritise:
    """A dispatcher's override: the call's new level and the tier that goes with it (None: the level's own)."""

    call_id: int
    level: int
    tier: str | None = None
    kind: ClassVar[ControlKind] = ControlKind.REPRIORITISE

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", _positive_int(self.call_id, "call_id"))
        if isinstance(self.level, bool) or self.level not in ESI_LEVELS:
            raise ValueError(f"level must be an ESI level, got {self.level!r}")
        object.__setattr__(self, "tier", self.tier or None)


@dataclass(frozen=True)
class Cancel:
    """The call was cancelled: stop generating it."""

    call_id: int
    kind: ClassVar[ControlKind] = ControlKind.CANCEL

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", _positive_int(self.call_id, "call_id"))


@dataclass(frozen=True)
class Regenerate:
    """The call's protocol was switched: generate it again under the plan the database now gives it."""

    call_id: int
    kind: ClassVar[ControlKind] = ControlKind.REGENERATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "call_id", _positive_int(self.call_id, "call_id"))


ControlMessage = ConfigChanged | Reprioritise | Cancel | Regenerate
_CONTROL_TYPES: dict[str, type[ControlMessage]] = {t.kind: t for t in (ConfigChanged, Reprioritise, Cancel, Regenerate)}


def control_to_json(message: ControlMessage) -> str:
    return json.dumps({"kind": str(message.kind), **asdict(message)})


def control_from_json(data: bytes | str) -> ControlMessage:
    """The message; ``ValueError`` for one that is not JSON, of no known kind, lacks a field or has a bad value."""
    payload = json.loads(_text(data))
    if not isinstance(payload, dict) or payload.get("kind") not in _CONTROL_TYPES:
        raise ValueError(f"unknown control message: {payload!r}")
    message_type = _CONTROL_TYPES[payload["kind"]]
    try:
        return message_type(**{f.name: payload[f.name] for f in fields(message_type) if f.name in payload})
    except TypeError as error:  # a missing field
        raise ValueError(str(error)) from error


# --- the board -----------------------------------------------------------------------------------------------
# Each event type and the fields it carries besides ``type`` (``seq`` on the dashboard socket: Zulip's protocol,
# triage/realtime.py). The call and metrics shapes inside them are built by ``triage.selectors.queue``.

BOARD_EVENTS: dict[str, frozenset[str]] = {
    "snapshot": frozenset({"seq", "server_time", "calls", "tiers", "aging_enabled", "metrics", "metrics_history"}),
    "call.updated": frozenset({"seq", "call"}),
    "call.removed": frozenset({"seq", "call_id"}),
    "metrics": frozenset({"seq", "metrics"}),
    "resync": frozenset({"seq", "reason", "dirty"}),
}
BOARD_REQUESTS: dict[str, frozenset[str]] = {"snapshot.request": frozenset()}  # browser → server
CALL_EVENTS: dict[str, frozenset[str]] = {
    "replay": frozenset({"text", "index", "done", "off_protocol"}),
    "token": frozenset({"index", "text"}),
    "guidance": frozenset({"text", "off_protocol"}),
    "restart": frozenset(),
    "done": frozenset({"status"}),
}


def snapshot_event(*, seq: int, snapshot: Mapping[str, Any], metrics_history: list[dict]) -> dict[str, Any]:
    return {"type": "snapshot", "seq": seq, **snapshot, "metrics_history": metrics_history}


def call_updated_event(call: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "call.updated", "call": call}


def call_removed_event(call_id: int) -> dict[str, Any]:
    return {"type": "call.removed", "call_id": int(call_id)}


def metrics_event(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "metrics", "metrics": metrics}


def resync_event(*, reason: str, dirty: int) -> dict[str, Any]:
    return {"type": "resync", "reason": reason, "dirty": dirty}


def replay_event(*, text: str, index: int, done: bool, off_protocol: bool) -> dict[str, Any]:
    return {"type": "replay", "text": text, "index": index, "done": done, "off_protocol": off_protocol}


def token_event(*, index: int, text: str) -> dict[str, Any]:
    return {"type": "token", "index": index, "text": text}


def guidance_event(text: str) -> dict[str, Any]:
    return {"type": "guidance", "text": text, "off_protocol": True}


def restart_event() -> dict[str, Any]:
    return {"type": "restart"}


def done_event(status: str) -> dict[str, Any]:
    return {"type": "done", "status": status}


class EventSchemaError(ValueError):
    pass


def check_event(event: Mapping[str, Any], schema: Mapping[str, frozenset[str]] = BOARD_EVENTS) -> None:
    """Raise ``EventSchemaError`` unless the event is one of the schema's types with exactly its fields."""
    kind = event.get("type")
    if kind not in schema:
        raise EventSchemaError(f"unknown event type {kind!r}")
    if set(event) - {"type"} != schema[kind]:
        raise EventSchemaError(f"{kind}: fields {sorted(set(event) - {'type'})}, expected {sorted(schema[kind])}")
