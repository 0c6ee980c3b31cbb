"""The suite's settings for an intake server it starts: the suite's own (tests/settings.py) with the intake's
restricted URLs, as config/settings_intake.py sets them on production's. The suite's settings come first: they
set the test key that production's settings, imported by both, require."""
# ruff: noqa: I001 - the order above is the point

from tests.settings import *  # noqa: F403

from config import settings_intake  # noqa: E402

ROOT_URLCONF = settings_intake.ROOT_URLCONF
