#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if len(sys.argv) > 1:
        from config.local_env import apply_local_stack_env

        # demo and the load tests run a stack of their own over http on 127.0.0.1, and the model commands
        # serve nothing (config/local_env.py); every other command gets production's settings and needs
        # DJANGO_SECRET_KEY. `demo --production-like` keeps production's settings behind its own TLS proxy.
        apply_local_stack_env(sys.argv[1], production_like="--production-like" in sys.argv)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
