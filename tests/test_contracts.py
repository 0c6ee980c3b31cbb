"""The messages at the process seams are typed records, built and parsed in their contract modules alone:
``triage/contracts.py`` (the inference stream, the control channel, the board's events) and
``scheduler/call_params.py`` (the values a call carries to a vLLM server). Each round-trips exactly; a malformed
one is refused, never guessed; and no other module builds one by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scheduler.call_params import PREFIX, CallParams
from scheduler.config import UNPREDICTED_OUTPUT_TOKENS, UNTRIAGED_LEVEL, SchedulerConfig
from triage.contracts import (
    BOARD_EVENTS,
    BOARD_REQUESTS,
    CALL_EVENTS,
    Cancel,
    ConfigChanged,
    ControlKind,
    EventSchemaError,
    Regenerate,
    Reprioritise,
    StreamEntry,
    check_event,
    control_from_json,
    control_to_json,
)

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("config", "triage", "worker", "judgment", "inference", "scheduler", "training", "tools")


# --- the inference stream -------------------------------------------------------------------------------------


def test_a_stream_entry_round_trips_through_redis_fields():
    entry = StreamEntry(call_id=42, enqueued_at=1700000000.25, accepted_at=1699999999.5, level=1,
                        predicted_output_tokens=180)
    raw = {k.encode(): str(v).encode() for k, v in entry.to_fields().items()}  # as redis-py returns them
    assert StreamEntry.from_fields(raw) == entry


@pytest.mark.parametrize("raw", [{}, {"call_id": "not-a-number"}, {"call_id": "0"}, {"call_id": "-3"},
                                 {"level": "1"}])
def test_an_entry_that_names_no_call_of_ours_is_refused(raw):
    assert StreamEntry.from_fields(raw) is None


def test_an_entry_without_readable_values_takes_the_untriaged_defaults():
    entry = StreamEntry.from_fields({"call_id": "7", "level": "9", "predicted_output_tokens": "x"})
    assert (entry.call_id, entry.level, entry.predicted_output_tokens) == (7, UNTRIAGED_LEVEL,
                                                                         UNPREDICTED_OUTPUT_TOKENS)


# --- the control channel --------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", [ConfigChanged(version=3), Reprioritise(call_id=5, level=1, tier="Immediate"),
                                     Reprioritise(call_id=5, level=2), Cancel(call_id=9), Regenerate(call_id=11)])
def test_each_control_message_round_trips_through_json(message):
    assert control_from_json(control_to_json(message).encode()) == message


def test_every_control_kind_has_its_message():
    kinds = {control_from_json(control_to_json(m)).kind for m in
             (ConfigChanged(version=1), Reprioritise(call_id=1, level=1), Cancel(call_id=1), Regenerate(call_id=1))}
    assert kinds == set(ControlKind)


@pytest.mark.parametrize("data", ['{"kind": "reboot"}', '{"kind": "cancel"}', '{"kind": "cancel", "call_id": "x"}',
                                  '{"kind": "reprioritise", "call_id": 1, "level": 7}', "[]", "not json"])
def test_a_malformed_control_message_is_refused(data):
    with pytest.raises(ValueError):
        control_from_json(data)


# --- the values a call carries to vLLM --------------------------------------------------------------------------


def test_call_params_round_trip_through_vllm_extra_args():
    config = SchedulerConfig(limited_preemption_c=1.5, preempt_on_arrival=False)
    tier = config.tier_for(None, 2)
    params = CallParams.for_call(level=2, predicted_tokens=90, accepted_at=1700000000.0, tier=tier, config=config,
                                 ref="17#2")
    assert CallParams.from_extra_args(params.to_extra_args(), priority=None, now=0.0) == params
    assert all(key.startswith(PREFIX) for key in params.to_extra_args())


def test_aging_switched_off_globally_sends_no_aging_step():
    config = SchedulerConfig(aging_enabled=False).with_tier_changes(aging_step_s=30.0)
    params = CallParams.for_call(level=4, predicted_tokens=10, accepted_at=0.0, tier=config.tier_for(None, 4),
                                 config=config)
    assert params.aging_step_s == 0.0


def test_a_request_without_our_values_takes_its_level_from_vllm_priority_clamped_to_the_scale():
    assert CallParams.from_extra_args(None, priority=9, now=5.0) == CallParams(
        level=5, predicted_tokens=UNPREDICTED_OUTPUT_TOKENS, accepted_at=5.0)
    assert CallParams.from_extra_args({}, priority=None, now=5.0).level == UNTRIAGED_LEVEL


def test_a_preemption_notice_round_trips_and_names_the_submission_it_is_about():
    from scheduler.preemption_notice import PreemptionNotice, parse_ref, submission_ref

    notice = PreemptionNotice(ref=submission_ref("call-17", 3), preemptions=2, computed_tokens=140)
    assert PreemptionNotice.from_bytes(notice.to_bytes()) == notice
    assert parse_ref(notice.ref) == ("call-17", 3)


# --- the board --------------------------------------------------------------------------------------------------


def test_an_event_with_a_missing_or_extra_field_fails_its_schema():
    with pytest.raises(EventSchemaError):
        check_event({"type": "call.removed", "seq": 1})
    with pytest.raises(EventSchemaError):
        check_event({"type": "call.removed", "seq": 1, "call_id": 2, "extra": 3})
    with pytest.raises(EventSchemaError):
        check_event({"type": "call.exploded", "seq": 1})
    check_event({"type": "call.removed", "seq": 1, "call_id": 2})


def test_the_board_handles_exactly_the_event_types_the_server_sends():
    board = (ROOT / "static/js/board.js").read_text()
    handled = set(re.findall(r'msg\.type === "([a-z.]+)"', board))
    sent = set(re.findall(r'type: "([a-z.]+)"', board))
    assert handled == set(BOARD_EVENTS) | set(CALL_EVENTS)
    assert sent <= set(BOARD_REQUESTS)


# --- built nowhere else -----------------------------------------------------------------------------------------


def _product_modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for package in PRODUCT for path in (ROOT / package).rglob("*.py")
            if "migrations" not in path.parts}


def _dict_keys(node: ast.Dict) -> dict[str, ast.expr | None]:
    return {k.value: v for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _hand_built(path: Path, tree: ast.Module) -> list[str]:
    """Where a module builds a contract's message itself: a dict with a control kind, a stream entry's fields, a
    board event's type; or a vLLM parameter name written out."""
    entry_fields = {"enqueued_at", "accepted_at", "predicted_output_tokens"}
    event_types = set(BOARD_EVENTS) | set(CALL_EVENTS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = _dict_keys(node)
            kind, event = keys.get("kind"), keys.get("type")
            if isinstance(kind, ast.Constant) and kind.value in set(ControlKind):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} control message {kind.value}")
            if "call_id" in keys and keys.keys() & entry_fields:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} stream entry")
            if isinstance(event, ast.Constant) and event.value in event_types:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} board event {event.value}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                rf"{PREFIX}[a-z_]+", node.value) and node.value[len(PREFIX):] in CallParams.__dataclass_fields__:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} vLLM parameter {node.value}")
    return found


def test_no_message_of_a_contract_is_built_outside_its_contract_module():
    homes = {ROOT / "triage/contracts.py", ROOT / "scheduler/call_params.py"}
    assert [place for path, tree in _product_modules().items() if path not in homes
            for place in _hand_built(path, tree)] == []


def test_the_hand_built_finder_finds_each_kind_of_message():
    source = ('a = {"kind": "cancel", "call_id": 1}\nb = {"call_id": 1, "enqueued_at": 2}\n'
              'c = {"type": "call.updated", "call": {}}\nd = {"triage_level": 1}\n')
    assert len(_hand_built(ROOT / "x.py", ast.parse(source))) == 4
