"""WebSocket routes (wrapped by session auth and the origin check in ``config.asgi``)."""

from django.urls import path

from triage.consumers import CallConsumer, DashboardConsumer

websocket_urlpatterns = [
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
    path("ws/calls/<int:call_id>/", CallConsumer.as_asgi()),
]
