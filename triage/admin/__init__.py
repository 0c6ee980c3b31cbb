"""The admin: tiers and scheduler settings for supervisors, API clients for admins, the audit log read-only.

Every write goes through a service, so it is audited with its actor and — for tiers and settings —
publishes ``{"kind": "config", "version": n}`` on commit; the running inference worker reloads within
a second. Access follows the roles in ``triage.roles`` (the user must also be staff to enter the admin).
"""

from django.contrib import admin

from . import clients, config, records  # noqa: F401 - each registers its models
from .config import protocol_library_view

admin.site.site_header = "Triage administration"
admin.site.site_title = "Triage admin"

__all__ = ("protocol_library_view",)
