"""Publishers of the generic hand-off: how stored messages reach a broker through Kombu."""
