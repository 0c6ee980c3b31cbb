"""The message a vLLM replica sends when it preempts one of our requests: the one typed record both sides use.

vLLM's OpenAI API streams a preempted request's tokens again once it resumes and says nothing of the pause, so
our plug-in (``inference/backends/vllm_scheduler.py``, inside the server's engine core) publishes a notice on a
ZeroMQ PUB socket for each preemption, vLLM's own preemptions under memory pressure included, and the worker's
pool (``inference/backends/vllm_pool.py``) subscribes to every replica's socket and records ``call.preempted``
on the call. PUB/SUB never blocks the publisher: a notice nobody receives is dropped (the call is not affected;
only its record of the pause is), as vLLM's own KV-event publisher does. No Django, nothing of vLLM.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

# The plug-in binds this endpoint (e.g. tcp://*:5557) when the server's environment names it.
EVENTS_BIND_ENV = "TRIAGE_VLLM_EVENTS"


def events_bind_endpoint() -> str:
    """Where this vLLM server's plug-in publishes (the variable above, read where the scan of
    docs/configuration.md sees it); empty: it publishes nothing."""
    return os.environ.get("TRIAGE_VLLM_EVENTS", "")


@dataclass(frozen=True)
class PreemptionNotice:
    """``ref``: the pool's name for the submission (``CallParams.ref``); ``preemptions``: how many times the
    server has now preempted it; ``computed_tokens``: the tokens of its KV cache dropped (recomputed on resume)."""

    ref: str
    preemptions: int
    computed_tokens: int

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> PreemptionNotice:
        values = json.loads(data)
        return cls(ref=str(values["ref"]), preemptions=int(values["preemptions"]),
                   computed_tokens=int(values["computed_tokens"]))


def submission_ref(request_id: str, submission: int) -> str:
    """The ``ref`` of one submission of a request: a resubmitted continuation's notices never name the old one."""
    return f"{request_id}#{submission}"


def parse_ref(ref: str) -> tuple[str, int]:
    request_id, _, submission = ref.rpartition("#")
    return request_id, int(submission)
