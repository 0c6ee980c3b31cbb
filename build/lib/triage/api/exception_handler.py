"""The API's one error shape, from one place:

    {"error": {"code": "invalid", "message": "transcript: This field is required.",
               "fields": {"transcript": ["This field is required."]}}}

``fields`` names every offending field (nested ones dotted: ``location.lat``); body-level problems
(malformed JSON, too large) are reported under ``body``, serializer-wide ones under ``non_field_errors``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from triage.services.errors import DomainError

from .parsers import PayloadTooLarge

BODY_FIELD = "body"


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class ErrorSerializer(serializers.Serializer):
    """The body of every 4xx response."""

    error = ErrorDetailSerializer()


class DomainAPIException(exceptions.APIException):
    def __init__(self, error: DomainError) -> None:
        super().__init__(detail=error.message, code=error.code)
        self.status_code = error.status_code
        self.fields = error.fields


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, DomainError):
        exc = DomainAPIException(exc)
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)  # adds WWW-Authenticate / Retry-After, rolls back
    if response is None:
        return None
    fields = _fields(exc)
    response.data = {"error": {"code": _code(exc), "message": _message(exc, fields), "fields": fields}}
    return response


def _code(exc: Exception) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    detail = getattr(exc, "detail", None)
    return getattr(detail, "code", None) or getattr(exc, "default_code", "error")


def _fields(exc: Exception) -> dict[str, list[str]]:
    if isinstance(exc, DomainAPIException):
        return exc.fields
    if isinstance(exc, exceptions.ValidationError):
        return _flatten(exc.detail)
    if isinstance(exc, exceptions.ParseError | PayloadTooLarge | exceptions.UnsupportedMediaType):
        return {BODY_FIELD: [str(exc.detail)]}
    return {}


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        out = {}
        for index, item in enumerate(detail):
            out.update(_flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return out
    items = detail if isinstance(detail, list) else [detail]
    return {prefix or api_settings.NON_FIELD_ERRORS_KEY: [str(item) for item in items]} if items else {}


def _message(exc: Exception, fields: dict[str, list[str]]) -> str:
    if isinstance(exc, exceptions.ValidationError) and fields:
        name, messages = next(iter(fields.items()))
        return f"{name}: {messages[0]}" + (f" (and {len(fields) - 1} more)" if len(fields) > 1 else "")
    detail = getattr(exc, "detail", "")
    return str(detail) if not isinstance(detail, dict | list) else "Invalid request."
