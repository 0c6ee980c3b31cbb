"""A dispatcher's own time zone: the cookie the board sets picks the zone pages render in; anything that is not
an IANA zone leaves the centre's."""

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils import timezone

from config.middleware import USER_TIME_ZONE_COOKIE, UserTimeZoneMiddleware


def _zone_seen(cookie: str | None) -> str:
    request = RequestFactory().get("/")
    if cookie is not None:
        request.COOKIES[USER_TIME_ZONE_COOKIE] = cookie
    middleware = UserTimeZoneMiddleware(lambda _: HttpResponse(timezone.get_current_timezone_name()))
    return middleware(request).content.decode()


@pytest.mark.parametrize(("cookie", "zone"), [
    ("Asia/Tokyo", "Asia/Tokyo"),
    (None, "centre"),
    ("Mars/Olympus_Mons", "centre"),
    ("../../etc/passwd", "centre"),
    ("x" * 100, "centre"),
])
def test_the_cookie_picks_the_zone_and_anything_else_leaves_the_centres(settings, cookie, zone):
    assert _zone_seen(cookie) == (settings.TIME_ZONE if zone == "centre" else zone)
    assert timezone.get_current_timezone_name() == settings.TIME_ZONE  # deactivated after the request
