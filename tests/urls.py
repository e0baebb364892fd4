from django.contrib import admin
from django.urls import include, path

from tests.testapp import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("agents/inline/", views.run_inline),
    path("agents/inline-non-atomic/", views.run_inline_outside_the_request_transaction),
    path("agents/submit/", views.submit),
    path("turnkit/", include("turnkit_django.urls")),
    path("media/<path:path>", views.media),
]
