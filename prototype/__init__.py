"""Prototypes for RabbitMQ support (not package code): see NOTES.md."""
