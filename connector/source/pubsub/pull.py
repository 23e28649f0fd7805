"""One Pull, as both receiver modes send it: its bounds and its timeout.

A Pull waits for messages up to :data:`PULL_TIMEOUT_SECONDS`. One that times out is not an answer
(the service may hold a Pull to its deadline with messages available) and may have leased messages
to nobody, answered after its client gave up: until its deadline plus the subscription's ack
deadline, no answer proves the subscription drained (:mod:`.drained`). Its shadow counts from when
it was sent.
"""

from __future__ import annotations

MAX_PULL_MESSAGES = 1000  # Pub/Sub's own bound on one Pull
FIRST_PULL_MESSAGES = 10  # before any message's size is known
PULL_TIMEOUT_SECONDS = 2.0
