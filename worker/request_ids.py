"""Call ids and engine request ids: the worker's one conversion between them.

Every seam of the app speaks call ids (``int``, the database's key); the engine, like vLLM, keys its requests
by strings. The worker turns one into the other here, at the engine's edge, and nowhere else.
"""

from __future__ import annotations


def request_id(call_id: int) -> str:
    return str(int(call_id))


def call_id_of(request_id: str) -> int:
    return int(request_id)
