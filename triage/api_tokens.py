"""The API token's format, shared by issuing (``services.clients``) and checking (``selectors.clients``).

``trg_<prefix>_<secret>``: the 8-hex-digit prefix finds the row (unique index), the secret is 32 random bytes, so
a plain SHA-256 (no slow KDF) is enough — there is nothing to brute-force. Only the hash is stored.
"""

from __future__ import annotations

import hashlib

TOKEN_PREFIX = "trg"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_split(token: str) -> tuple[str, str] | None:
    """(prefix, secret) of a well-formed token, else None."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or len(parts[1]) != 8 or not parts[2]:
        return None
    return parts[1], parts[2]
