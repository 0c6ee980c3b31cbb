"""The link rule for calls about one incident (judgment/incident_links.py): time, place, then words."""

from judgment.incident_links import CallForLinking, LinkRule, best_link, link_score

BUS_STATION = (53.7962, -1.5371)


def call(id_: int, text: str, *, t: float = 0, lat: float | None = BUS_STATION[0], lon: float | None = BUS_STATION[1],
         uncertainty_m: float | None = 30, address: str = "") -> CallForLinking:
    return CallForLinking(id=id_, received_s=t, text=text, lat=lat, lon=lon, uncertainty_m=uncertainty_m,
                          address=address).with_words()


COLLAPSE = "A man has just collapsed at the bus station by stand 12, he's not breathing, someone is doing CPR"
SAME = "I'm a bus driver at the station, a passenger collapsed getting off my bus, people are doing chest compressions"
OTHER = "My daughter has a high temperature and a rash that doesn't fade when I press a glass on it"


def test_two_callers_about_one_collapse_at_one_place_within_minutes_are_linked():
    assert link_score(call(1, COLLAPSE), call(2, SAME, t=70)) is not None


def test_the_same_words_far_apart_or_long_after_are_not_one_incident():
    assert link_score(call(1, COLLAPSE), call(2, SAME, lat=53.80, lon=-1.50)) is None  # 2.5 km away
    assert link_score(call(1, COLLAPSE), call(2, SAME, t=LinkRule().max_gap_s + 1)) is None


def test_another_emergency_next_door_is_not_linked_by_place_alone():
    assert link_score(call(1, COLLAPSE), call(2, OTHER, t=30)) is None


def test_a_caller_without_coordinates_is_linked_by_the_place_and_event_in_their_words():
    by_address = call(2, "Hi, I'm at Leeds City Bus Station on Dyer Street, a man has collapsed and isn't breathing",
                      t=140, lat=None, lon=None, address="Leeds City Bus Station, Dyer Street")
    assert link_score(call(1, COLLAPSE), by_address) is not None


def test_two_calls_without_any_location_are_never_linked_by_words_alone():
    assert link_score(call(1, COLLAPSE, lat=None, lon=None), call(2, COLLAPSE, t=5, lat=None, lon=None)) is None


def test_one_address_with_different_complaints_is_two_events():
    # (two calls from one care home that both say "resident" are linked by that one rare word: a dispatcher
    # splits them, and a split call is never proposed again — docs/decisions/linked-calls.md)
    home = "Elm Lodge Care Home, 3 Elm Road"
    a = call(1, "a lady here has fallen and hurt her hip, she can't get up", lat=None, lon=None, address=home)
    b = call(2, "a gentleman's blood sugar is very low and he's confused and sweaty", t=60, lat=None, lon=None,
             address=home)
    assert link_score(a, b) is None


def test_the_best_link_is_the_most_similar_open_call():
    first, second = call(1, COLLAPSE), call(2, OTHER, t=10)
    assert best_link(call(3, SAME, t=70), [first, second]) == 1
    assert best_link(call(3, "my car has a flat tyre", t=70), [first, second]) is None
