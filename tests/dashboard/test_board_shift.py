"""The board for a shift, in real Chromium against daphne: an unacknowledged ESI-1 call sounds until someone
acknowledges it and escalates to the supervisors after its tier's timer; a lost connection sounds an alarm
until the board is live again; focus stays on the selected row, the same element, through 100 updates; the
command line overrides and claims, and every board shows who works a call."""

from __future__ import annotations

import time

import pytest

from tests.dashboard.conftest import user_with_password
from tests.dashboard.test_browser import off_the_page_thread, open_board, row
from tests.fixtures.browser import login
from triage.models import Call, Tier

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def sounds(page: object, kind: str, call_id: int | None = None) -> int:
    return page.evaluate("([kind, id]) => window.triageBoard.sounds.filter((s) => s.kind === kind && (id === null || s.id === id)).length",
                         [kind, call_id])


def test_an_esi_1_call_sounds_until_acknowledged_and_escalates_to_the_supervisor_after_its_timer(
    page, board_server, supervisor_login, make_call
):
    Tier.objects.filter(esi_levels=[1]).update(alert_repeat_s=1, acknowledge_within_s=3)
    open_board(page, board_server, supervisor_login)
    page.mouse.click(5, 5)  # a dispatcher's first click: the browser lets the board play sound from now on
    call = make_call(1, text="My husband collapsed, he is not breathing.")
    row(page, call.pk).wait_for()
    page.wait_for_function("id => window.triageBoard.sounds.filter((s) => s.id === id).length >= 3", arg=call.pk)
    assert page.evaluate("window.triageBoard.audioState") == "running"  # played, not just counted
    assert page.locator("#sound-blocked").is_hidden()

    # nobody acknowledged it within 3 s: escalated, on every board, and the supervisor's sounds the escalation
    page.locator("#escalations").wait_for(state="visible")
    assert f"#{call.pk}" in page.locator("#escalations").inner_text()
    assert "Supervisor" in page.locator("#escalations").inner_text()
    assert row(page, call.pk).locator(".overdue").is_visible()
    page.wait_for_function("id => window.triageBoard.sounds.some((s) => s.kind === 'escalation' && s.id === id)",
                           arg=call.pk)

    page.keyboard.press("j")
    page.wait_for_selector(f'#call-panel [data-call-id="{call.pk}"] form[data-action="acknowledge"]')
    page.wait_for_load_state("networkidle")
    page.keyboard.press("a")
    page.wait_for_function("id => window.triageBoard.calls.get(id)?.acknowledged", arg=call.pk)
    page.locator("#escalations").wait_for(state="hidden")
    after_ack = sounds(page, "esi1", call.pk)
    page.wait_for_timeout(2500)  # more than two repeat periods
    assert sounds(page, "esi1", call.pk) == after_ack
    assert Call.objects.get(pk=call.pk).acknowledged_at is not None


def test_a_lost_connection_sounds_an_alarm_until_the_board_is_live_again(page, board_server, dispatcher_login):
    open_board(page, board_server, dispatcher_login)
    board_server.stop()
    page.locator("#overlay").wait_for(state="visible")
    page.wait_for_function("window.triageBoard.sounds.filter((s) => s.kind === 'connection').length >= 2",
                           timeout=15_000)
    board_server.start()
    page.wait_for_selector("#conn-status.conn-live", timeout=30_000)
    alarms = sounds(page, "connection")
    page.wait_for_timeout(5000)  # longer than the alarm's period
    assert sounds(page, "connection") == alarms


def test_focus_stays_on_the_selected_row_element_through_100_updates(page, board_server, dispatcher_login, make_call,
                                                                    dispatcher):
    from triage.services.overrides import call_override_level

    calls = [make_call(3, text=f"Caller reports a problem, case {i}.") for i in range(6)]
    open_board(page, board_server, dispatcher_login)
    page.keyboard.press("j")
    selected = calls[0].pk
    page.wait_for_selector(f'#call-panel [data-call-id="{selected}"]')
    assert page.evaluate("document.activeElement.dataset.id") == str(selected)
    page.evaluate("document.activeElement.dataset.marker = 'kept'")  # the same element, not a re-created one
    seq_before = int(page.locator("#board").get_attribute("data-seq"))
    final = {}

    def updates() -> None:  # the other calls change level back and forth, moving around the selected one
        for i in range(100):
            other = calls[1 + i % 5]
            final[other.pk] = 2 if i % 2 == 0 else 4
            call_override_level(call=other, level=final[other.pk], reason=f"update {i}", user=dispatcher)
            time.sleep(0.02)  # over ~3 s: the board receives them as many events (the feed coalesces bursts)

    off_the_page_thread(updates)
    page.wait_for_function("final => Object.entries(final).every(([id, level]) => window.triageBoard.calls.get(Number(id))?.level === level)",
                           arg={str(k): v for k, v in final.items()}, timeout=30_000)
    page.wait_for_timeout(300)  # the last render
    assert int(page.locator("#board").get_attribute("data-seq")) >= seq_before + 5  # many updates, not one snapshot
    focused = page.evaluate("[document.activeElement.dataset.id, document.activeElement.dataset.marker]")
    assert focused == [str(selected), "kept"]
    assert row(page, selected).get_attribute("aria-current") == "true"


def test_the_command_line_overrides_and_claims_and_another_board_shows_the_claim(
    page, board_server, dispatcher_login, make_user, make_call
):
    user_with_password(make_user, "olga", "dispatcher")
    call = make_call(4, text="Twisted ankle, can walk.")
    make_call(3)
    open_board(page, board_server, dispatcher_login)
    page.keyboard.press("/")
    command = page.locator("#command")
    assert page.evaluate("document.activeElement.id") == "command"
    command.fill(f"#{call.pk}")
    command.press("Enter")
    page.wait_for_selector(f'#call-panel [data-call-id="{call.pk}"] form[data-action="claim"]')
    page.wait_for_load_state("networkidle")
    command.fill("O 2 caller now says he fainted twice")
    command.press("Enter")
    page.wait_for_function("id => window.triageBoard.calls.get(id)?.level === 2", arg=call.pk)
    page.wait_for_load_state("networkidle")
    page.wait_for_selector(f'#call-panel [data-call-id="{call.pk}"] form[data-action="claim"]')
    command.fill("M")
    command.press("Enter")
    page.wait_for_function("id => window.triageBoard.calls.get(id)?.assigned_to === 'dina'", arg=call.pk)
    refreshed = Call.objects.select_related("assessment").get(pk=call.pk)
    assert refreshed.level == 2 and refreshed.assessment.override_reason == "caller now says he fainted twice"
    assert refreshed.assigned_to.username == "dina"

    second = page.context.browser.new_context().new_page()
    try:
        login(second, board_server.url, "olga")
        second.wait_for_selector("#conn-status.conn-live")
        assert row(second, call.pk).locator(".claimed").inner_text() == "dina"
    finally:
        second.context.close()


def test_linked_calls_sit_together_on_the_board_and_a_dispatcher_splits_one_out_by_command(
    page, board_server, dispatcher_login, make_call
):
    from triage.models import TriageAssessment
    from triage.services.incidents import calls_link

    first = make_call(1, text="A man has collapsed at the bus station, he is not breathing")
    unrelated = make_call(2, text="My daughter has a high temperature and a rash")
    second = make_call(3, text="someone collapsed at the bus station, he is not breathing, we are doing CPR")
    for call in (first, unrelated, second):  # one place for the two about the collapse, another for the child
        Call.objects.filter(pk=call.pk).update(location_lat=53.7962 if call is not unrelated else 53.70,
                                               location_lon=-1.5371)
    linked = list(Call.objects.filter(pk__in=[first.pk, second.pk]).order_by("pk"))
    calls_link(linked, {a.call_id: a for a in TriageAssessment.objects.filter(call__in=linked)})
    assert Call.objects.get(pk=second.pk).incident_id == Call.objects.get(pk=first.pk).incident_id is not None

    open_board(page, board_server, dispatcher_login)
    order = page.evaluate("[...document.querySelectorAll('#queue-body tr[data-id]')].map((r) => Number(r.dataset.id))")
    assert order[:3] == [first.pk, second.pk, unrelated.pk]  # the ESI 3 caller sits with its incident's ESI 1
    assert row(page, second.pk).locator(".incident").is_visible()

    command = page.locator("#command")
    page.keyboard.press("/")
    command.fill(f"#{second.pk}")
    command.press("Enter")
    page.wait_for_selector(f'#call-panel [data-call-id="{second.pk}"] form[data-action="link-split"]')
    page.wait_for_load_state("networkidle")
    command.fill("S")
    command.press("Enter")
    page.wait_for_function("id => window.triageBoard.calls.get(id)?.incident_id === null", arg=second.pk)
    assert Call.objects.get(pk=second.pk).incident_split
    order = page.evaluate("[...document.querySelectorAll('#queue-body tr[data-id]')].map((r) => Number(r.dataset.id))")
    assert order[:3] == [first.pk, unrelated.pk, second.pk]


def test_a_dispatcher_reads_times_in_their_computers_zone_when_they_ask(page, board_server, dispatcher_login, make_call):
    from zoneinfo import ZoneInfo

    from django.conf import settings

    call = make_call(3)
    tokyo = page.context.browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1400, "height": 1000})
    try:
        board = tokyo.new_page()
        open_board(board, board_server, dispatcher_login)
        row(board, call.pk).click()
        panel = board.locator(f'#call-panel [data-call-id="{call.pk}"]')
        panel.wait_for()
        centre = f"{call.received_at.astimezone(ZoneInfo(settings.TIME_ZONE)):%H:%M:%S %Z}"  # TRIAGE_TIME_ZONE
        assert centre in panel.inner_text()
        board.get_by_role("button", name="Shortcuts").click()
        assert board.locator("#local-zone").inner_text() == "Asia/Tokyo"
        board.get_by_label("Show times in this computer's time zone").check()
        board.keyboard.press("Escape")
        local = f"{call.received_at.astimezone(ZoneInfo('Asia/Tokyo')):%H:%M:%S %Z}"  # JST
        board.wait_for_function("text => document.getElementById('call-panel').innerText.includes(text)", arg=local)
        board.reload()  # remembered: the cookie goes with every request
        board.wait_for_selector("#conn-status.conn-live")
        row(board, call.pk).click()
        board.wait_for_function("text => document.getElementById('call-panel').innerText.includes(text)", arg=local)
    finally:
        tokyo.close()
