"""Django admin pages over the Redis store, and ``manage.py zset``.

    INSTALLED_APPS += ["celery_zset_scheduler.contrib.django"]

plus the usual ``path("admin/", admin.site.urls)``. The store's data never goes into the database:
the models are unmanaged, there only so that Django's permissions decide who may view and who may
change each page. The Celery app is ``CELERY_ZSET_ADMIN_APP`` (a dotted path) when set, else the one
app of the process that ``install(app)`` was called on, else one configured from Django's settings
(``CELERY_`` namespace).
"""
