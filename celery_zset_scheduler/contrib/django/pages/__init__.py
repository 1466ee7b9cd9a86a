"""One module per admin page: the overview, scheduled tasks and dead letters."""
