"""The package version (one place: the top package and the worker's control reply read it)."""

__version__ = "0.1.0"
