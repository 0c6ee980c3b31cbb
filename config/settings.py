"""Settings from the environment. Production is the default: DEBUG off, https only, secure cookies, HSTS,
and no start without DJANGO_SECRET_KEY. `manage.py demo` opts out explicitly (config/local_env.py); every
variable read here and elsewhere is in docs/configuration.md."""

import importlib.util
import os
import zoneinfo
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TRIAGE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _env_flag(name: str, default: bool) -> bool:
    """A yes/no variable. A value that is neither is refused: a typo must not silently turn security off."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ImproperlyConfigured(f"{name}={value!r}: use 1 or 0.")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number.") from None


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip()
if not SECRET_KEY:
    # No fallback: a fixed key in the repository would let anyone forge sessions and CSRF tokens.
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set. Set it to a long random value, e.g. "
        "DJANGO_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))'); "
        "`manage.py demo` makes and keeps its own under var/. See docs/configuration.md."
    )
DEBUG = _env_flag("DJANGO_DEBUG", False)
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

# --- https -------------------------------------------------------------------------------------------------
# Behind a TLS-terminating proxy: the proxy must set (and overwrite any client's) this header. "" when
# clients reach the server directly. The name as sent on the wire, e.g. X-Forwarded-Proto.
_PROXY_SSL_HEADER = os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto").strip()
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https") if _PROXY_SSL_HEADER else None
)
SECURE_SSL_REDIRECT = _env_flag("DJANGO_SECURE_SSL_REDIRECT", True)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_flag("DJANGO_SECURE_COOKIES", True)
# One year, as the HSTS preload list asks; browsers honour the header on https responses only.
SECURE_HSTS_SECONDS = _env_int("DJANGO_SECURE_HSTS_SECONDS", 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = _env_flag("DJANGO_SECURE_HSTS_PRELOAD", True)
# Django's defaults, stated: a board that no other site may frame, no URLs (call ids) leaked to other
# origins in Referer, no content sniffing.
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI and Redoc assets served by us (SPECTACULAR_SETTINGS *_DIST = "SIDECAR"): the docs load no CDN
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "triage",  # the dispatch app (its migrations' label)
    "worker",  # the inference worker: `manage.py run_inference_worker`
    # The model commands (the image builds its models at first start), and the harness where the tree has it
    # (the production image ships no tools/: .dockerignore)
    *(app for app in ("training", "tools") if importlib.util.find_spec(app) is not None),
]

MIDDLEWARE = [
    # first: probes are answered before host validation and the https redirect (config/health.py)
    "config.health.HealthMiddleware",
    # /metrics for a scraper holding TRIAGE_METRICS_TOKEN, and every request counted (config/metrics.py)
    "config.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # WhiteNoise, async-capable (config/middleware.py): static files before sessions and auth touch them
    "config.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # a dispatcher's own time zone, when their browser asks for it (config/middleware.py)
    "config.middleware.UserTimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last, as django-axes asks: turns a locked-out login into its lockout response
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'triage.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        # web, Celery and the inference worker share the file: WAL lets readers run beside a writer
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
# Under ASGI every request runs its sync code in a fresh thread, so per-thread persistent connections pile
# up (PostgreSQL: "too many clients"). The web process uses a psycopg pool instead (DATABASE_POOL_MAX > 0).
if DATABASES["default"]["ENGINE"].endswith("postgresql") and int(os.environ.get("DATABASE_POOL_MAX", "0")) > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2, "max_size": int(os.environ["DATABASE_POOL_MAX"]), "timeout": 10,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Brute-force protection (django-axes): after LOGIN_FAILURE_LIMIT failed logins for one username from one
# address, that pair is refused (429) for the cool-off, whatever the password; a success resets the count.
# Per pair, not per username alone, so nobody can lock a dispatcher out of the board from elsewhere. The
# address is REMOTE_ADDR: behind a proxy, start daphne with --proxy-headers (docs/configuration.md).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out pair before a password is checked
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = _env_int("TRIAGE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=_env_int("TRIAGE_LOGIN_COOLOFF_S", 15 * 60))  # 0: until an admin unlocks
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "triage.views.login_locked_out"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
# The centre's own zone (an IANA name, e.g. America/Chicago): the board, the admin and the search show its local
# time. Stored times stay UTC (USE_TZ); the API answers in ISO 8601 with offsets whatever it is.
TIME_ZONE = os.environ.get("TRIAGE_TIME_ZONE", "UTC")
try:
    zoneinfo.ZoneInfo(TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(f"TRIAGE_TIME_ZONE={TIME_ZONE!r} is not a time zone (an IANA name, e.g. Europe/London)") from None
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# `manage.py collectstatic` writes here (git-ignored; the image collects at build); WhiteNoise serves it,
# compressed. With DEBUG (the demo) it serves straight from static/ and the apps, no collectstatic needed.
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production: hashed names (board.3f2a9c.js), cached for good, so a board left open through an upgrade
    # fetches the new files instead of running old JavaScript against a new server. With DEBUG (the demo)
    # the files come straight from static/ under their own names: no collected manifest is needed.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage" if DEBUG
                    else "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# Oversized bodies are refused before parsing (413 from the API's exception handler).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("TRIAGE_MAX_BODY_BYTES", str(256 * 1024)))

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Bearer first: a request without credentials gets 401 + WWW-Authenticate, not 403.
        "triage.api.authentication.ApiClientTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PARSER_CLASSES": ["triage.api.parsers.LimitedJSONParser"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_RATES": {"intake": os.environ.get("TRIAGE_INTAKE_RATE", "6000/min")},
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "triage.api.exception_handler.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Triage intake API",
    "DESCRIPTION": "Emergency calls in; ESI triage, queue state and dispatcher guidance out.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1: the document declares the webhook events a call system receives (triage/api/webhook_schema.py)
    "OAS_VERSION": "3.1.0",
    "WEBHOOKS": "triage.api.webhook_schema.WEBHOOKS",
    # The docs pages work offline and leak nothing to a CDN: the UI bundles come from drf-spectacular-sidecar.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("TRIAGE_CACHE_PREFIX", "triage"),
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 30},
    }
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# A stack of its own on a shared Redis (e.g. `manage.py loadtest`) names its own queue.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("TRIAGE_CELERY_QUEUE", "triage")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Above the longest countdown a task is sent with (a webhook retry's backoff, TRIAGE_WEBHOOK_BACKOFF_MAX_S): Redis
# hands an unacknowledged message, ETA ones included, to another worker after this, which would deliver a
# retry twice. A lost triage task does not wait for it: the sweep re-sends calls left in `received`.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(float(os.environ.get("TRIAGE_WEBHOOK_BACKOFF_MAX_S", "600"))) + 300}
# Intake sends the triage task on commit: fail fast when the broker is away (the sweep re-sends), never
# hold an HTTP response for seconds of reconnect attempts.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
CELERY_BROKER_CONNECTION_TIMEOUT = float(os.environ.get("CELERY_BROKER_CONNECTION_TIMEOUT", "1"))
# Webhook deliveries wait on call systems' receivers (seconds each, and a receiver may black-hole them): they
# have a queue and workers of their own, so they never wait ahead of a call's classification.
CELERY_WEBHOOK_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.webhooks"
CELERY_TASK_ROUTES = {
    "triage.tasks.deliver_webhook": {"queue": CELERY_WEBHOOK_QUEUE},
    "triage.tasks.*": {"queue": CELERY_TASK_DEFAULT_QUEUE},
}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BEAT_SCHEDULE = {
    "sweep-stuck-calls": {
        "task": "triage.tasks.sweep_stuck_calls",
        "schedule": float(os.environ.get("TRIAGE_SWEEP_INTERVAL_S", "15")),
    },
}

MODELS_DIR = Path(os.environ.get("TRIAGE_MODELS_DIR", BASE_DIR / "models"))

# One namespace for the product's own knobs (DRF-style).
TRIAGE = {
    "TRANSCRIPT_MAX_CHARS": int(os.environ.get("TRIAGE_TRANSCRIPT_MAX_CHARS", "20000")),
    "INFERENCE_STREAM": os.environ.get("TRIAGE_INFERENCE_STREAM", "triage:inference"),
    "INFERENCE_GROUP": "inference",
    "CONTROL_CHANNEL": os.environ.get("TRIAGE_CONTROL_CHANNEL", "triage:control"),
    "METRICS_TOKEN": os.environ.get("TRIAGE_METRICS_TOKEN", ""),
    "SWEEP_STUCK_AFTER_S": float(os.environ.get("TRIAGE_SWEEP_STUCK_AFTER_S", "30")),
    # linked calls (triage/services/incidents.py): off, every call is its own incident and generates its guidance
    "LINK_CALLS": _env_flag("TRIAGE_LINK_CALLS", True),
    "PREDICTORS_DIR": Path(os.environ.get("TRIAGE_PREDICTORS_DIR", MODELS_DIR / "predictors")),
    # Dotted path of `load(path=None) -> TriagePredictor` used by the Celery triage task.
    "PREDICTOR_LOADER": os.environ.get("TRIAGE_PREDICTOR_LOADER", "judgment.predictors.load_triage_predictor"),
    # Calls accepted within this many seconds of a published, not yet started triage task share it (0: a
    # task per call). The TTL only bounds how long a lost publish can hold the slot; the sweep re-sends.
    "TRIAGE_TASK_COALESCE_S": float(os.environ.get("TRIAGE_TASK_COALESCE_S", "10")),
    # torch threads of a Celery pool process's classifier. 1: two OpenMP threads on two cores that the inference
    # engine also uses ran 10x slower per call (barrier waits on a descheduled thread), one thread does not.
    "CLASSIFIER_THREADS": int(os.environ.get("TRIAGE_CLASSIFIER_THREADS", "1")),
    "SWEEP_BATCH_MAX": int(os.environ.get("TRIAGE_SWEEP_BATCH_MAX", "500")),
    # How long a web process may trust a token it has verified (rotation/deactivation delay, in seconds).
    "API_TOKEN_CACHE_S": float(os.environ.get("TRIAGE_API_TOKEN_CACHE_S", "5")),
    # How long a client's previous API token keeps working after a rotation (0: it stops at once)
    "API_TOKEN_OVERLAP_S": float(os.environ.get("TRIAGE_API_TOKEN_OVERLAP_S", "86400")),
    # GET /api/v1/calls/<id>/stream: a keep-alive comment (and a check that the call has not ended) after this
    # many seconds without a token; proxies tend to close idle connections after 30-60 s.
    "STREAM_KEEPALIVE_S": float(os.environ.get("TRIAGE_STREAM_KEEPALIVE_S", "15")),
    # How long a signed stream URL (GET calls/<id>/stream-url, for a browser's EventSource) may be opened
    "STREAM_URL_TTL_S": float(os.environ.get("TRIAGE_STREAM_URL_TTL_S", "600")),
    # Webhooks (triage/services/webhooks.py): a POST waits this long for an answer; a failed one is tried
    # again after BACKOFF_S, 2x, 4x, ... (at most BACKOFF_MAX_S), MAX_ATTEMPTS attempts in all (6: ~5 min).
    "WEBHOOK_TIMEOUT_S": float(os.environ.get("TRIAGE_WEBHOOK_TIMEOUT_S", "5")),
    "WEBHOOK_MAX_ATTEMPTS": _env_int("TRIAGE_WEBHOOK_MAX_ATTEMPTS", 6),
    "WEBHOOK_BACKOFF_S": float(os.environ.get("TRIAGE_WEBHOOK_BACKOFF_S", "10")),
    "WEBHOOK_BACKOFF_MAX_S": float(os.environ.get("TRIAGE_WEBHOOK_BACKOFF_MAX_S", "600")),
    # How long the previous webhook secret keeps signing after a rotation (both signatures are sent meanwhile)
    "WEBHOOK_SECRET_OVERLAP_S": float(os.environ.get("TRIAGE_WEBHOOK_SECRET_OVERLAP_S", "86400")),
    # Off: a webhook URL that resolves to a loopback/private/link-local address is refused (SSRF).
    "WEBHOOK_ALLOW_PRIVATE_NETWORKS": _env_flag("TRIAGE_WEBHOOK_ALLOW_PRIVATE_NETWORKS", False),
    "INFERENCE_BACKEND": os.environ.get("INFERENCE_BACKEND", "hf"),
    "INFERENCE_MODEL": os.environ.get("INFERENCE_MODEL", str(MODELS_DIR / "guidance-llm")),
    "INFERENCE_DEVICE": os.environ.get("INFERENCE_DEVICE", "cpu"),
    # INFERENCE_BACKEND=vllm: the worker streams from these vLLM OpenAI-compatible servers (comma-separated),
    # each started with our plug-in (docs/deploy.md); VLLM_POLICY says which policy they run.
    "VLLM_URLS": [u.strip() for u in os.environ.get("VLLM_URLS", "http://127.0.0.1:8100").split(",") if u.strip()],
    # Each server's preemption-notice endpoint (tcp://host:port, comma-separated, as its TRIAGE_VLLM_EVENTS
    # binds): a call preempted inside a server is recorded as preempted (scheduler/preemption_notice.py)
    "VLLM_EVENTS": [u.strip() for u in os.environ.get("VLLM_EVENTS", "").split(",") if u.strip()],
    "VLLM_MODEL": os.environ.get("VLLM_MODEL", "guidance"),  # the servers' --served-model-name
    "VLLM_POLICY": os.environ.get("VLLM_POLICY", "semantic"),
    # How the worker routes calls over the servers (scheduler/routing.py ROUTING_RULES); empty: its default
    "VLLM_ROUTING": os.environ.get("VLLM_ROUTING", ""),
    "VLLM_MAX_NUM_SEQS": _env_int("VLLM_MAX_NUM_SEQS", 32),
    "VLLM_MAX_MODEL_LEN": _env_int("VLLM_MAX_MODEL_LEN", 512),
    # Each local server's --max-num-batched-tokens: the tokens one engine step computes, so how long a step lasts
    # and how soon an urgent arrival can be let in (a scheduler acts only between steps). On a CPU vLLM's 2048
    # makes a step last seconds (BENCHMARKS.md, "vLLM"); 0: vLLM's own default (GPUs).
    "VLLM_MAX_NUM_BATCHED_TOKENS": _env_int("VLLM_MAX_NUM_BATCHED_TOKENS", 256),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
                   "json": {"()": "config.log_format.JsonFormatter"}},
    # plain for a person at a terminal; json for a log pipeline (one object per line, call_id where known)
    "handlers": {"console": {"class": "logging.StreamHandler",
                             "formatter": "json" if os.environ.get("TRIAGE_LOG_FORMAT") == "json" else "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("TRIAGE_LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
