from django.core.management import call_command


def test_migrations_are_complete_for_the_models(db):
    # makemigrations --check exits non-zero when a model change has no migration
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
