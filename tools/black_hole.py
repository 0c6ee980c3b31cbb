"""A webhook receiver that black-holes connections: it accepts each one and never answers, as a call system's
endpoint behind a dropped firewall rule or a hung server does. `manage.py loadtest --webhooks black-hole` points
the load test's client at one, so every delivery holds its attempt for TRIAGE_WEBHOOK_TIMEOUT_S."""

from __future__ import annotations

import socket
import threading


class BlackHole:
    """Listens on 127.0.0.1; accepted connections are kept open, unread, until ``close``."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self.accepted = 0
        threading.Thread(target=self._accept, name="black-hole", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}/hooks/triage"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:  # closed
                return
            self._held.append(connection)
            self.accepted += 1

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        for connection in self._held:
            connection.close()
