"""What keeps the admin's lists as cheap with a million finished turns as with none.

* :class:`BoundedPaginator`: the result count stops at :data:`COUNT_LIMIT` rows (a count of a
  ``LIMIT``-ed subquery), and the lists never count the whole table beside it
  (``show_full_result_count = False``): past the limit, narrow the list with a filter or search.
* :class:`RecentValuesFilter`: a filter on a column (agent, model, tool) lists the values of the
  :data:`RECENT` newest rows, read through the list's own index, not a ``SELECT DISTINCT`` over the
  table; the value a link selected stays listed.
* No ``date_hierarchy`` (it lists the years, months and days of every row): the ``created``
  filter offers fixed windows (today, past 7 days, this month ...), a range on the index.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

#: The lists count at most this many rows.
COUNT_LIMIT = 10_000
#: A column filter lists the values of this many newest rows.
RECENT = 1_000


class BoundedPaginator(Paginator):
    """A paginator that counts at most :data:`COUNT_LIMIT` rows."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if isinstance(rows, QuerySet):
            # The count reads a LIMIT-ed subquery of bare ids, not the page's columns.
            return rows.order_by().values("pk")[:COUNT_LIMIT].count()
        return len(rows)


class RecentValuesFilter(admin.SimpleListFilter):
    """Filter on ``field`` by the values the newest :data:`RECENT` rows hold."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        model = model_admin.model
        newest = model._default_manager.order_by("-created_at", "-pk").values_list(
            self.field, flat=True)[:RECENT]
        values = {value for value in newest if value}
        if self.value():
            values.add(self.value())
        return [(value, value) for value in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class AgentFilter(RecentValuesFilter):
    title, parameter_name, field = _("agent"), "agent_name", "agent_name"


class ModelFilter(RecentValuesFilter):
    title, parameter_name, field = _("model"), "model", "model"


class ToolNameFilter(RecentValuesFilter):
    title, parameter_name, field = _("tool"), "tool_name", "tool_name"


#: The ``created`` filter: fixed windows, no query for its choices.
CREATED = ("created_at", admin.DateFieldListFilter)


__all__ = ["COUNT_LIMIT", "CREATED", "RECENT", "AgentFilter", "BoundedPaginator",
           "ModelFilter", "RecentValuesFilter", "ToolNameFilter"]
