"""The intake server's settings (``DJANGO_SETTINGS_MODULE=config.settings_intake``): the project's settings with
the intake's restricted URLs (config/urls_intake.py). Nothing else differs."""

from config.settings import *  # noqa: F403 - every setting, one changed

ROOT_URLCONF = "config.urls_intake"
