"""The linked-calls evaluation burst: the hand-written incidents of ``fixtures/evaluation/incidents/incidents.yaml``
among unrelated calls of the written corpus, placed over a city and a ten-minute window — some of them next door
to an incident, some from one shared address — and how well the link rule (``judgment/incident_links.py``) finds
the incidents in it. Deterministic (seeded): ``manage.py evaluate_incident_links`` and the load test's
``--pattern incidents`` read the same burst."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from judgment.incident_links import DEFAULT_RULE, CallForLinking, LinkRule, best_link

REPO = Path(__file__).resolve().parents[1]
INCIDENTS = REPO / "fixtures" / "evaluation" / "incidents" / "incidents.yaml"
CORPUS = REPO / "fixtures" / "calls" / "written" / "calls-1.jsonl"
CITY = (53.80, -1.55)  # the unrelated calls fall within CITY_RADIUS_M of here
CITY_RADIUS_M = 5000
WINDOW_S = 600
NEIGHBOURS = 12  # unrelated calls placed 60-400 m from an incident, during it
SHARED_ADDRESS = "Elm Lodge Care Home, 3 Elm Road"  # unrelated calls from one address (a care home)
SHARED_ADDRESS_CALLS = 4
M_PER_DEG_LAT = 111_320.0


@dataclass(frozen=True)
class BurstCall:
    key: str  # "A3": the incident and the caller; "u17": unrelated
    incident: str | None
    offset_s: float
    transcript: str
    lat: float | None
    lon: float | None
    uncertainty_m: float | None
    address: str


def _moved(lat: float, lon: float, north_m: float, east_m: float) -> tuple[float, float]:
    return lat + north_m / M_PER_DEG_LAT, lon + east_m / (M_PER_DEG_LAT * math.cos(math.radians(lat)))


def incident_burst(unrelated: int = 80, seed: int = 7, incidents: Path = INCIDENTS) -> list[BurstCall]:
    """The burst, in arrival order: every call of ``incidents`` and ``unrelated`` corpus calls."""
    rng = random.Random(seed)
    calls: list[BurstCall] = []
    spec = yaml.safe_load(incidents.read_text())["incidents"]
    for incident in spec:
        site = incident["site"]
        for n, call in enumerate(incident["calls"], 1):
            lat = lon = uncertainty = None
            address = ""
            if call.get("address_only"):
                address = site["address"]
            elif not call.get("no_location"):
                lat, lon = _moved(site["lat"], site["lon"], call["d_lat_m"], call["d_lon_m"])
                uncertainty = float(call["uncertainty_m"])
            calls.append(BurstCall(f"{incident['id']}{n}", incident["id"], incident["starts_s"] + call["offset_s"],
                                   " ".join(call["text"].split()), lat, lon, uncertainty, address))
    corpus = [json.loads(line)["transcript"] for line in CORPUS.read_text().splitlines() if line.strip()]
    texts = rng.sample(corpus, unrelated)
    for i, text in enumerate(texts):
        offset = rng.uniform(0, WINDOW_S)
        lat = lon = uncertainty = None
        address = ""
        if i < NEIGHBOURS:  # next door to an incident, while it is going on
            incident = spec[i % len(spec)]
            bearing, distance = rng.uniform(0, 2 * math.pi), rng.uniform(60, 400)
            lat, lon = _moved(incident["site"]["lat"], incident["site"]["lon"], distance * math.cos(bearing),
                              distance * math.sin(bearing))
            offset = incident["starts_s"] + rng.uniform(0, 240)
            uncertainty = rng.choice([20.0, 50.0, 100.0])
        elif i < NEIGHBOURS + SHARED_ADDRESS_CALLS:
            address = SHARED_ADDRESS
        else:
            bearing, distance = rng.uniform(0, 2 * math.pi), CITY_RADIUS_M * math.sqrt(rng.random())
            lat, lon = _moved(*CITY, distance * math.cos(bearing), distance * math.sin(bearing))
            uncertainty = rng.choice([10.0, 30.0, 100.0, 300.0])
        calls.append(BurstCall(f"u{i + 1}", None, offset, " ".join(text.split()), lat, lon, uncertainty, address))
    return sorted(calls, key=lambda c: (c.offset_s, c.key))


@dataclass
class LinkScore:
    proposed: int  # calls linked to an earlier one
    correct: int  # ... to a call of their own incident
    linkable: int  # incident calls with an earlier call of their incident
    precision: float
    recall: float
    links: dict[str, str]  # call key -> the key it was linked to


def evaluate_links(calls: Sequence[BurstCall], *, rule: LinkRule = DEFAULT_RULE) -> LinkScore:
    """Each call, in arrival order, is linked to the best earlier call the rule accepts (as the triage worker
    does when it records a verdict); the links scored against the incidents."""
    seen: list[CallForLinking] = []
    key_of: dict[int, str] = {}
    links: dict[str, str] = {}
    for i, call in enumerate(calls):
        item = CallForLinking(id=i, received_s=call.offset_s, text=call.transcript, lat=call.lat,
                              lon=call.lon, uncertainty_m=call.uncertainty_m, address=call.address).with_words()
        target = best_link(item, seen, rule)
        if target is not None:
            links[call.key] = key_of[target]
        seen.append(item)
        key_of[i] = call.key
    incident_of = {c.key: c.incident for c in calls}
    correct = sum(1 for a, b in links.items() if incident_of[a] is not None and incident_of[a] == incident_of[b])
    firsts = {}
    for c in calls:
        if c.incident:
            firsts.setdefault(c.incident, c.key)
    linkable = sum(1 for c in calls if c.incident and firsts[c.incident] != c.key)
    return LinkScore(proposed=len(links), correct=correct, linkable=linkable,
                     precision=correct / len(links) if links else 1.0, recall=correct / linkable if linkable else 1.0,
                     links=links)
