"""Strict input fields: a string is a string, a number is a number, and no control characters.

DRF's CharField turns 123 into "123" and its numeric fields accept "1.5"; an intake that guesses hides bugs
in the caller, so these refuse instead. Unknown keys are refused by ``StrictSerializer``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

# C0 controls except TAB, LF, CR; DEL; C1 controls. NUL is in C0.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"[\t\n\r]")


class CleanCharField(serializers.CharField):
    default_error_messages = {
        "not_a_string": "Must be a string.",
        "control_characters": "Control characters are not allowed.",
        "invalid_unicode": "Invalid unicode (unpaired surrogate).",
        "line_break": "Must be a single line.",
    }

    def __init__(self, *, single_line: bool = False, **kwargs: Any) -> None:
        self.single_line = single_line
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        if _CONTROL.search(data):
            self.fail("control_characters")
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("invalid_unicode")
        if self.single_line and _LINE_BREAKS.search(data):
            self.fail("line_break")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"not_an_integer": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"not_a_number": "Must be a number.", "not_finite": "Must be finite."}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("not_a_number")
        if not math.isfinite(data):
            self.fail("not_finite")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not declare, naming each one."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)
