"""One JSON object per log line, for a log pipeline to index (``TRIAGE_LOG_FORMAT=json``).

Every process (web, Celery, beat, the inference worker) writes the same fields: time, level, logger, process
name, message, and ``call_id`` wherever the line is about one call (``logger.info(..., extra={"call_id": pk})``),
so one call can be followed from intake to its last token across processes.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else was passed in ``extra`` and is logged as a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, *args: object, process_kind: str | None = None, **kwargs: object) -> None:
        super().__init__()
        self.process_kind = process_kind or os.environ.get("TRIAGE_PROCESS_KIND", "")

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "process": self.process_kind or record.processName,
            "pid": record.process,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
