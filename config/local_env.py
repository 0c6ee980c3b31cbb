"""The environment of a stack that runs on this machine only: plain http on 127.0.0.1, a secret key under var/.

settings.py defaults to production (no DEBUG, https only, secure cookies, HSTS, a secret key from the
environment or a refusal to start). The commands that start a whole stack of their own on this machine
(`manage.py demo`, and the load tests that stand one up to measure it) cannot use https and have no
operator to hand them a key, so manage.py opts them out here, explicitly, before Django reads its settings.
Nothing here imports Django: it runs before the settings exist.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import MutableMapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SECRET_KEY_FILE_NAME = "secret-key"

# Commands that build or score the models from fixtures/: they serve nothing and sign nothing (no session, no
# CSRF token, no signed value outlives the process), so a key made for the process alone is as good as any.
OFFLINE_COMMANDS = frozenset({"build_models", "train_predictors", "evaluate_triage", "classify", "calibrate"})
# Commands that start daphne/Celery/the inference worker of their own on 127.0.0.1 over plain http.
LOCAL_STACK_COMMANDS = frozenset({"demo", "loadtest", "loadtest_intake", "faultdrill"})
# Of those, the ones a person watches in a browser: the board's conveniences (static files straight from
# static/, the debug error page) are worth more there than production's behaviour.
DEBUG_COMMANDS = frozenset({"demo"})

# Plain http on 127.0.0.1: no redirect to https (nothing listens there), cookies the browser sends over
# http, and no HSTS (a browser that kept it would refuse http://127.0.0.1 for a year).
PLAIN_HTTP_ENV = {
    "DJANGO_SECURE_SSL_REDIRECT": "0",
    "DJANGO_SECURE_COOKIES": "0",
    "DJANGO_SECURE_HSTS_SECONDS": "0",
}


def var_dir(environ: MutableMapping[str, str] = os.environ) -> Path:
    """The same directory settings.VAR_DIR names (TRIAGE_VAR_DIR, default var/ in the checkout)."""
    return Path(environ.get("TRIAGE_VAR_DIR") or REPO_ROOT / "var")


def local_secret_key(directory: Path) -> str:
    """This checkout's own secret key: made once (random, file mode 0600), then read back on every run.

    Reusing it keeps the demo's sessions valid across restarts; it is never a fixed value, so no two
    machines share it and nothing in the repository can sign for them.
    """
    path = directory / SECRET_KEY_FILE_NAME
    if path.exists():
        key = path.read_text().strip()
        if key:
            return key
        path.unlink()  # an empty file (a crash between create and write): make a new key
    directory.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    try:
        # O_EXCL: of two commands starting at once, one writes the key and the other reads it back.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


def apply_local_stack_env(command: str, environ: MutableMapping[str, str] = os.environ, *,
                          production_like: bool = False) -> bool:
    """For a local-stack ``command``, fill in what the operator did not set; returns whether it did.

    Values already in the environment win: `DJANGO_DEBUG=0 manage.py demo` runs the demo without DEBUG.
    ``production_like`` (`manage.py demo --production-like`): the stack runs behind its own TLS proxy, so it
    keeps production's settings whole (https, secure cookies, HSTS, no DEBUG); only the key is made here.
    """
    if command in OFFLINE_COMMANDS:
        environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
        return False
    if command not in LOCAL_STACK_COMMANDS:
        return False
    if not environ.get("DJANGO_SECRET_KEY"):
        environ["DJANGO_SECRET_KEY"] = local_secret_key(var_dir(environ))
    if production_like:
        return True
    for name, value in PLAIN_HTTP_ENV.items():
        environ.setdefault(name, value)
    if command in DEBUG_COMMANDS:
        environ.setdefault("DJANGO_DEBUG", "1")
    return True


if __name__ == "__main__":
    # `python -m config.local_env`: print this checkout's key, for a Makefile target or a shell on this machine.
    print(local_secret_key(var_dir()))
