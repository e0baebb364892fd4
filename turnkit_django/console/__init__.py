"""What operators read: the timeline and transcript of a turn tree, the console's pages
(:mod:`.views`) and the admin's custom views (:mod:`.admin_views`). Read-only: every change an
operator makes goes through :mod:`turnkit_django.services`."""
