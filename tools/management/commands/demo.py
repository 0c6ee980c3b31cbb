"""`manage.py demo`: the whole product on this machine with embedded defaults, then a few sample calls.

`manage.py demo --production-like` runs compose's topology instead, on this host: the TLS proxy (Caddy with
proxy/Caddyfile, the file compose mounts) in front of daphne (the board, sockets and guidance streams) and the
gunicorn intake (the REST API), the Celery triage and webhook workers, beat and the inference worker, with
production's settings (https, no DEBUG, hashed static files).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from pathlib import Path
from urllib import request as urlrequest

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from tools.stack import (
    Stack,
    free_port,
    proxy_root_certificate,
    redis_reachable,
    start_embedded_redis,
    stop_requested,
)

SAMPLE_CALLS = Path(settings.BASE_DIR) / "fixtures" / "sample_calls.jsonl"
TOKEN_FILE = Path(settings.VAR_DIR) / "demo-api-token"


class Command(BaseCommand):
    help = "Build what is missing, start web + Celery + inference worker, replay sample calls, run until Ctrl-C."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--port", type=int, default=None,
                            help="where the board answers (default 8000; 8443, https, with --production-like)")
        parser.add_argument("--production-like", action="store_true",
                            help="compose's topology: TLS proxy, daphne, gunicorn intake; production settings")
        parser.add_argument("--no-replay", action="store_true")
        parser.add_argument("--exit-after-replay", action="store_true", help="stop once the samples are queued")

    def handle(self, *args, port: int | None, production_like: bool, no_replay: bool, exit_after_replay: bool,  # noqa: ANN002
               **options) -> None:  # noqa: ANN003
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        port = port or (8443 if production_like else 8000)
        if production_like:  # the board's login posts from the proxy's origin
            env.setdefault("DJANGO_CSRF_TRUSTED_ORIGINS", f"https://127.0.0.1:{port}")
        embedded_redis = None
        if not redis_reachable(settings.REDIS_URL):
            embedded_redis, env["REDIS_URL"] = start_embedded_redis(Path(settings.VAR_DIR))
            self.stdout.write(f"no Redis at {settings.REDIS_URL}: started an embedded one at {env['REDIS_URL']}")
        self._prepare()
        token = self._demo_token()
        stack = Stack(env=env, log_dir=Path(settings.VAR_DIR) / "logs")
        with stop_requested() as stop:
            try:
                self._run(stack, port, production_like, token, no_replay, exit_after_replay, stop)
            finally:
                stack.stop_all()  # a further signal only sets ``stop`` again: the stopping runs to its end
                if embedded_redis is not None:
                    embedded_redis.shutdown()

    def _run(self, stack: Stack, port: int, production_like: bool, token: str, no_replay: bool,
             exit_after_replay: bool, stop: threading.Event) -> None:
        web_port, intake_port = (free_port(), free_port()) if production_like else (port, None)
        starts = [lambda: stack.start_web(web_port), stack.start_celery, lambda: self._start_inference(stack)]
        if production_like:
            proxy_data = Path(settings.VAR_DIR) / "proxy"
            starts[1:1] = [lambda: stack.start_intake(intake_port),
                           lambda: stack.start_proxy(port, web_port, intake_port, proxy_data)]
        for start in starts:
            if stop.is_set():
                return
            start()
        base = f"http{'s' if production_like else ''}://127.0.0.1:{port}"
        context = None
        if production_like:
            root = proxy_root_certificate(proxy_data)
            context = ssl.create_default_context(cafile=str(root))
            self.stdout.write(f"TLS:    the proxy's own certificate authority; trust {root}")
        self.stdout.write(self.style.SUCCESS(f"board:  {base}/   (login: dispatcher / dispatcher)"))
        self.stdout.write(f"admin:  {base}/admin/   (login: admin / admin)")
        self.stdout.write(f"API:    {base}/api/docs/   token in {TOKEN_FILE}")
        self.stdout.write(f"logs:   {stack.log_dir}/")
        if not no_replay and not stop.is_set():
            self._replay(base, token, context)
        if exit_after_replay:
            return
        self.stdout.write("running; Ctrl-C stops everything", ending="\n")
        self.stdout.flush()
        while not stop.wait(1.0):
            for name in stack.restart_dead():
                self.stderr.write(f"{name} stopped; started it again (restart {stack.restarts[name]}) — see "
                                  f"{stack.log_dir}/{name}.log")
        self.stdout.write("stopping…")

    def _start_inference(self, stack: Stack) -> None:
        """Our embedded engine; with INFERENCE_BACKEND=vllm, a local vLLM server running our plug-in first."""
        t = settings.TRIAGE
        if t["INFERENCE_BACKEND"] == "vllm":
            self.stdout.write("starting a vLLM server with the semantic plug-in (about a minute)...")
            urls = stack.start_vllm(t["INFERENCE_MODEL"], policy=t["VLLM_POLICY"],
                                    max_num_seqs=t["VLLM_MAX_NUM_SEQS"], max_model_len=t["VLLM_MAX_MODEL_LEN"],
                                    served_name=t["VLLM_MODEL"],
                                    max_num_batched_tokens=t["VLLM_MAX_NUM_BATCHED_TOKENS"])
            stack.env = dict(stack.env, VLLM_URLS=",".join(urls), VLLM_EVENTS=",".join(stack.vllm_events))
            self.stdout.write(f"vLLM:   {', '.join(urls)}")
        stack.start_inference()

    def _prepare(self) -> None:
        from triage.models import DispatchPriorityRule, Tier

        call_command("migrate", verbosity=0)
        if not settings.DEBUG:  # `DJANGO_DEBUG=0 manage.py demo`: WhiteNoise serves the collected files only
            call_command("collectstatic", interactive=False, verbosity=0)
        if not Tier.objects.exists():
            call_command("loaddata", str(Path(settings.BASE_DIR) / "fixtures" / "default_tiers.json"), verbosity=0)
        if not DispatchPriorityRule.objects.exists():
            call_command("loaddata", str(Path(settings.BASE_DIR) / "fixtures" / "default_dispatch_priorities.json"),
                         verbosity=0)
        call_command("seed_demo_users", verbosity=0)
        if not Path(settings.TRIAGE["INFERENCE_MODEL"]).exists() or not Path(settings.TRIAGE["PREDICTORS_DIR"]).exists():
            self.stdout.write("building the models (first run only)…")
            call_command("build_models")

    def _demo_token(self) -> str:
        from triage.models import ApiClient
        from triage.services.clients import api_client_create, api_client_rotate

        client = ApiClient.objects.filter(name="demo-call-system").first()
        if client is None:
            _, token = api_client_create(name="demo-call-system", scopes=list(ApiClient.ALL_SCOPES))
        elif TOKEN_FILE.exists():
            return TOKEN_FILE.read_text().strip()
        else:
            _, token = api_client_rotate(client=client)
        TOKEN_FILE.write_text(token)
        TOKEN_FILE.chmod(0o600)
        return token

    def _replay(self, base: str, token: str, context: ssl.SSLContext | None) -> None:
        stamp = int(time.time())
        for line in SAMPLE_CALLS.read_text().splitlines():
            call = json.loads(line)
            call["external_id"] = f"{call['external_id']}-{stamp}"
            call.setdefault("received_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            req = urlrequest.Request(
                f"{base}/api/v1/calls/", data=json.dumps(call).encode(), method="POST",
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            with urlrequest.urlopen(req, timeout=10, context=context) as resp:
                body = json.loads(resp.read())
                self.stdout.write(f"  {resp.status} call {body.get('id')}: {call['transcript'][:60]}…")
