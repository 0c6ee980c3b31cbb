"""Demo accounts, one per role: dispatcher, supervisor, admin. Each password is the username unless --password.

For demos and local development only: `manage.py demo` runs it and prints the logins.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandParser

from triage.roles import ADMIN, DISPATCHER, ROLES, SUPERVISOR

# username, role, staff (may enter the admin), superuser
DEMO_USERS = (
    ("dispatcher", DISPATCHER, False, False),
    ("supervisor", SUPERVISOR, True, False),
    ("admin", ADMIN, True, True),
)


class Command(BaseCommand):
    help = "Create (or reset) the demo users dispatcher, supervisor and admin (password = username by default)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", default=None, help="one password for all three (default: the username)")

    def handle(self, *args: object, password: str | None, **options: object) -> None:
        users = get_user_model()
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
        for username, role, staff, superuser in DEMO_USERS:
            user, created = users.objects.get_or_create(username=username)
            user.is_staff, user.is_superuser = staff, superuser
            user.set_password(password or username)
            user.save()
            user.groups.set([groups[role]])
            if options.get("verbosity", 1):
                self.stdout.write(f"{'created' if created else 'reset'} {username} ({role})")
