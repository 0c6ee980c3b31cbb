"""The board's static files come from WhiteNoise: collected and compressed in production, straight from
static/ with DEBUG (the demo); in Django's sync mode (gunicorn, the test client) and async mode (daphne)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import AsyncClient, Client

BOARD_FILES = {
    "/static/js/board.js": "javascript",
    "/static/vendor/htmx-2.0.11.min.js": "javascript",
    "/static/css/board.css": "text/css",
}
REPO = Path(__file__).resolve().parents[2]
# Closing a response sends request_finished, whose handler checks the database connection.
pytestmark = pytest.mark.django_db


@pytest.fixture
def collected(settings: object, tmp_path: Path) -> Path:
    """Production's layout: `collectstatic` into STATIC_ROOT with production's storage, finders off."""
    from config import settings as production

    settings.STORAGES = production.STORAGES if not production.DEBUG else {
        **production.STORAGES, "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}}
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    settings.WHITENOISE_USE_FINDERS = settings.WHITENOISE_AUTOREFRESH = False
    call_command("collectstatic", interactive=False, verbosity=0)
    return settings.STATIC_ROOT


def test_production_names_the_board_files_by_their_content_and_caches_them_for_good(collected):
    """A board left open through an upgrade asks for the new files: their names change with their content."""
    from django.templatetags.static import static

    from config import settings as production

    assert production.STORAGES["staticfiles"]["BACKEND"].endswith("CompressedManifestStaticFilesStorage")
    url = static("js/board.js")
    assert url != "/static/js/board.js" and url.startswith("/static/js/board.") and url.endswith(".js")
    response = Client().get(url)
    assert response.status_code == 200 and "immutable" in response["Cache-Control"]
    response.close()


def test_the_collected_board_files_are_served_compressed_with_their_content_types(collected):
    assert (collected / "js" / "board.js.gz").exists()
    client = Client()
    for path, content_type in BOARD_FILES.items():
        response = client.get(path, headers={"Accept-Encoding": "gzip"})
        assert response.status_code == 200, path
        assert content_type in response["Content-Type"] and response["Content-Encoding"] == "gzip"
        assert response["X-Content-Type-Options"] == "nosniff"  # the security headers apply to them too
        response.close()


async def test_daphne_gets_the_same_files_through_the_async_path(collected):
    response = await AsyncClient().get("/static/js/board.js")
    assert response.status_code == 200
    assert response.content == (REPO / "static" / "js" / "board.js").read_bytes()


async def test_an_unchanged_file_is_answered_not_modified_in_async_mode(collected):
    first = await AsyncClient().get("/static/css/board.css")
    again = await AsyncClient().get("/static/css/board.css", headers={"If-None-Match": first["ETag"]})
    assert again.status_code == 304 and again.content == b""


def test_with_debug_the_files_come_straight_from_static_without_collectstatic(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "never-collected"
    settings.WHITENOISE_USE_FINDERS = settings.WHITENOISE_AUTOREFRESH = True
    for path in BOARD_FILES:
        response = Client().get(path)
        assert response.status_code == 200, path
        response.close()


def test_a_missing_static_file_is_a_plain_404(collected):
    assert Client().get("/static/js/nothing-here.js").status_code == 404
