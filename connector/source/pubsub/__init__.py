"""The Pub/Sub parts both receiver modes use.

Opening a subscription, chunks of held messages, the leaser, the acker and the one rule by which
acknowledgements are read, the remembered ids, and how many Pulls to keep in flight.

Nothing here knows Spark or the offset protocol; the modes (:mod:`..driver`, :mod:`..executors`)
compose these parts.
"""
