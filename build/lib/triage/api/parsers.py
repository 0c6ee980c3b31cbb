"""JSON only, with a hard size cap, a nesting limit and a bound on integers: every hostile body is a 4xx.

DRF reads the request stream itself and skips Django's body check, hence the size cap here. Python's json
recurses once per nesting level, so 50,000 ``[`` raised RecursionError (a 500); and an integer of a few
hundred digits parsed fine, then overflowed ``float()`` in a FloatField (another 500).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

# The intake's bodies are one object of scalars; a little room for clients that send more structure.
MAX_NESTING_DEPTH = 20
# Past this the number cannot be stored (a PostgreSQL bigint) and no field of ours accepts it.
MAX_INTEGER_DIGITS = 19


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


class LimitedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"Request body over {limit} bytes.")
        try:
            # get_encoding: the request's charset, text codecs only (no bz2_codec to inflate a small body)
            data = json.loads(raw.decode(get_encoding(parser_context or {})), parse_int=_bounded_int)
        except RecursionError:
            # json's C scanner stops at the interpreter's recursion limit; nothing is left half-done.
            raise _too_deep() from None
        except ValueError as exc:  # malformed JSON, invalid UTF-8 (UnicodeDecodeError), an integer out of range
            raise ParseError(f"JSON parse error - {exc}") from None
        if _deeper_than(data, MAX_NESTING_DEPTH):
            raise _too_deep()
        return data


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"integer out of range ({len(text)} digits)")
    return int(text)


def _too_deep() -> ParseError:
    return ParseError(f"JSON nested deeper than {MAX_NESTING_DEPTH} levels.")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether any array or object lies more than ``limit`` levels down (the outermost is level 1).

    Iterative, O(containers): the limit must not be checked by the recursion it guards against.
    """
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False
