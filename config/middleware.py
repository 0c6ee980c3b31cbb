"""Middleware of our own: static files through WhiteNoise in both of Django's modes, and a user's time zone.

WhiteNoise's own middleware is sync only. Under daphne (ASGI) Django would then move every request, static
or not, onto a thread and back around it; this subclass passes other requests straight on in whichever mode
the stack runs, and reads a static file (the board's are a few kB) on a thread into an ordinary response,
so nothing is streamed from a sync iterator inside the event loop.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone
from whitenoise.middleware import WhiteNoiseMiddleware


class DualModeMiddleware:
    """A middleware that runs in whichever mode the stack runs (daphne's async, gunicorn's sync), so Django never
    moves a request onto a thread for it. ``self.is_async`` says which; ``get_response`` is the next layer."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)


USER_TIME_ZONE_COOKIE = "triage_tz"


class UserTimeZoneMiddleware(DualModeMiddleware):
    """Times in a dispatcher's own zone when their browser asks (the board's help sets the cookie
    ``USER_TIME_ZONE_COOKIE`` to the computer's IANA zone); otherwise the centre's (``TRIAGE_TIME_ZONE``).
    Stored times stay UTC; only what pages render changes."""

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        _activate_user_zone(request)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        _activate_user_zone(request)
        try:
            return await self.get_response(request)
        finally:
            timezone.deactivate()


def _activate_user_zone(request: HttpRequest) -> None:
    name = request.COOKIES.get(USER_TIME_ZONE_COOKIE, "")
    if not name or len(name) > 64:
        return
    try:
        timezone.activate(zoneinfo.ZoneInfo(name))
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass  # not a zone: the centre's stands


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if iscoroutinefunction(self):
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        static_file = self._static_file(request.path_info)
        if static_file is None:
            return await self.get_response(request)
        return await sync_to_async(self._read, thread_sensitive=False)(static_file, request)

    def _static_file(self, path: str) -> object | None:
        # autorefresh (DEBUG) looks on disk each time; otherwise the files indexed at start-up
        return self.find_file(path) if self.autorefresh else self.files.get(path)

    @staticmethod
    def _read(static_file: object, request: HttpRequest) -> HttpResponse:
        # WhiteNoise's answer (status, headers for gzip/brotli variants, ranges, 304) with the body read whole.
        answer = static_file.get_response(request.method, request.META)
        body = b""
        if answer.file is not None:
            with answer.file:
                body = answer.file.read()
        response = HttpResponse(body, status=int(answer.status))
        del response["Content-Type"]
        for name, value in answer.headers:
            response[name] = value
        return response
