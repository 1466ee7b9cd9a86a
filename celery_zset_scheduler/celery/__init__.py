"""Everything that imports Celery: wiring, the publisher, the beat scheduler and the CLI."""
