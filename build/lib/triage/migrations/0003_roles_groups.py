from django.db import migrations

ROLES = ("dispatcher", "supervisor", "admin")


def create_role_groups(apps, schema_editor):
    group = apps.get_model("auth", "Group")
    for name in ROLES:
        group.objects.get_or_create(name=name)


def remove_role_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("triage", "0002_api_client_token_prefix_unique_throttle_rate"),
    ]

    operations = [migrations.RunPython(create_role_groups, remove_role_groups)]
