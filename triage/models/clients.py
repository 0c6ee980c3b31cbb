"""API clients: the call systems allowed to post calls, their tokens and their webhook secrets."""

from __future__ import annotations

from django.db import models


class ApiClient(models.Model):
    """A call-handling system allowed to post calls. Only a hash of its token is stored."""

    SCOPE_WRITE = "calls:write"
    SCOPE_READ = "calls:read"
    ALL_SCOPES = (SCOPE_WRITE, SCOPE_READ)

    name = models.CharField(max_length=100, unique=True)
    token_prefix = models.CharField(max_length=12, unique=True, editable=False)
    token_hash = models.CharField(max_length=128, editable=False)
    scopes = models.JSONField(default=list)
    throttle_rate = models.CharField(
        max_length=20, blank=True, help_text='Requests per period, e.g. "600/min"; empty: the default intake rate'
    )
    is_active = models.BooleanField(default=True)
    share_weight = models.PositiveSmallIntegerField(
        default=1, help_text="Fair share of the LLM work among call systems, within one ESI level: a call system of "
        "weight 2 gets twice the service of one of weight 1 while both have calls waiting (never across levels)")
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    # After a rotation the previous token works too, until then: a 24/7 call system switches without a gap.
    token_previous_prefix = models.CharField(max_length=12, blank=True, db_index=True, editable=False)
    token_previous_hash = models.CharField(max_length=128, blank=True, editable=False)
    token_previous_until = models.DateTimeField(null=True, blank=True, editable=False)
    webhook_url = models.URLField(
        max_length=500, blank=True, help_text="http(s) URL that receives call.triaged/done/failed (empty: none)"
    )
    # Kept in clear, unlike the token: signing needs the secret itself (HMAC-SHA256, docs/call-systems.md).
    webhook_secret = models.CharField(max_length=100, blank=True, editable=False)
    # After a rotation the previous secret signs too, until then: a receiver can switch without a gap.
    webhook_secret_previous = models.CharField(max_length=100, blank=True, editable=False)
    webhook_secret_previous_until = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    # DRF treats request.user as a user; an ApiClient stands in for one.
    @property
    def is_authenticated(self) -> bool:
        return True

