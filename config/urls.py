from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from triage import views
from triage.admin import protocol_library_view

urlpatterns = [
    path("admin/protocols/", admin.site.admin_view(protocol_library_view), name="admin-protocols"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("triage.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema", template_name="triage/api_redoc.html"), name="api-redoc"),
    # the dispatcher board (issue 5)
    path("", views.board, name="dashboard"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("calls/", views.call_search, name="call-search"),
    path("calls/<int:pk>/", views.call_detail, name="call-detail"),
    path("calls/<int:pk>/panel/", views.call_panel, name="call-panel"),
    path("calls/<int:pk>/override/", views.call_override, name="call-override"),
    path("calls/<int:pk>/confirm-level/", views.call_confirm_level_view, name="call-confirm-level"),
    path("calls/<int:pk>/acknowledge/", views.call_acknowledge_view, name="call-acknowledge"),
    path("calls/<int:pk>/close/", views.call_close_view, name="call-close"),
    path("calls/<int:pk>/cancel/", views.call_cancel_view, name="call-cancel"),
    path("calls/<int:pk>/retry/", views.call_retry_view, name="call-retry"),
    path("calls/<int:pk>/protocol/", views.call_protocol_view, name="call-protocol"),
    path("calls/<int:pk>/claim/", views.call_claim_view, name="call-claim"),
    path("calls/<int:pk>/assign/", views.call_assign_view, name="call-assign"),
    path("calls/<int:pk>/link/confirm/", views.call_link_confirm_view, name="call-link-confirm"),
    path("calls/<int:pk>/link/split/", views.call_link_split_view, name="call-link-split"),
]
