"""Redis URLs as they may be shown to people: never with a password."""

from __future__ import annotations


def mask_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0] if ":" in credentials else ""
    return f"{scheme}://{user + ':' if user else ''}***@{host}"
