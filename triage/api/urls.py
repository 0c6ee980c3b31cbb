from django.urls import path

# <str:…>, not <int:…>: a malformed id must get the API's JSON 404, not Django's HTML one.
from .call_updates import CallUpdatesApi
from .calls import CallCancelApi, CallCollectionApi, CallItemApi, CallRetryApi
from .stream import CallStreamApi, CallStreamUrlApi
from .webhooks import WebhookPingApi, WebhookResendApi

urlpatterns = [
    path("calls/", CallCollectionApi.as_view(), name="api-calls"),
    path("calls/<str:call_id>/", CallItemApi.as_view(), name="api-call-detail"),
    path("calls/<str:call_id>/cancel/", CallCancelApi.as_view(), name="api-call-cancel"),
    path("calls/<str:call_id>/retry/", CallRetryApi.as_view(), name="api-call-retry"),
    path("calls/<str:call_id>/updates/", CallUpdatesApi.as_view(), name="api-call-updates"),
    # no trailing slash: the address EventSource clients are given (docs/call-systems.md)
    path("calls/<str:call_id>/stream", CallStreamApi.as_view(), name="api-call-stream"),
    path("calls/<str:call_id>/stream-url", CallStreamUrlApi.as_view(), name="api-call-stream-url"),
    path("webhooks/ping/", WebhookPingApi.as_view(), name="api-webhooks-ping"),
    path("webhooks/resend/", WebhookResendApi.as_view(), name="api-webhooks-resend"),
]
