"""Writes. Every service takes keyword-only arguments, runs in one transaction, writes its audit row in that
transaction and sends its side effects (Celery, Redis, Channels) only after the commit."""
