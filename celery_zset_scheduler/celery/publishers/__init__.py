"""Publishers of the dispatcher's hand-off: how stored messages reach a broker (Kombu's Redis
queues written directly, RabbitMQ with publisher confirms, any Kombu transport).

Run by the dispatcher process. Imports :mod:`..core` and the layers below; not the producer,
worker, periodic, backlog or dispatcher roles (the dispatcher picks a publisher).
"""
