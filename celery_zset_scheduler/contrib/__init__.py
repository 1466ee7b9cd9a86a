"""Integrations with frameworks above Celery (Django)."""
