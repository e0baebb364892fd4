from django.contrib import admin

from .models import Refund


@admin.register(Refund)
class RefundAdmin(admin.ModelAdmin):
    list_display = ["id", "order_id", "amount_cents", "idempotency_key", "created_at"]
    readonly_fields = ["order_id", "amount_cents", "note", "idempotency_key", "created_at"]
