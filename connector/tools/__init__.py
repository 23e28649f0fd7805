"""Tooling around the connector: the ``crdb-pubsub`` command and the changefeed simulator.

Nothing in the core (``decode``, ``source``, ``apply``) imports from here.
"""
