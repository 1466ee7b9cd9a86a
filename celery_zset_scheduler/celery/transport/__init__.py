"""The Redis broker transport an installed app's connections use when its broker is a
``redis://`` URL: Kombu's own, with what at-least-once delivery after the hand-off needs
(:mod:`.redis_broker`); :mod:`.choose` picks it for each connection.
``zset_scheduler_broker_transport = False`` keeps Kombu's.

Run by every process that connects to the broker (producers, workers, dispatchers). Imports
:mod:`..core` and the layers below; no other role.
"""
