"""What every process of an installed app shares: its installation (settings, store, dead letters),
Celery's task messages in the store's form, the Celery versions' differences, our signals.

Run by every process. Imports only the layers below (``ops``, ``dispatch``, ``store``, ``model``),
Celery and Kombu: no other role of this layer.
"""
