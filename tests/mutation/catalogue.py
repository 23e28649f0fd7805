"""Plausible single-line defects of the source, one a mutant: what the tests must kill.

Each replaces one exact piece of a source file (found exactly once) by another. They are the kind
of slip a change could make: a bound off by one, a rule's condition dropped, a step done in the
wrong place, a fix undone. ``python -m mutation`` (``tests/mutation/__main__.py``) applies each to a
copy of ``connector/`` and runs a tier of the tests against it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under connector/
    old: str
    new: str
    why: str  # what it breaks, in the user's terms
    # Why no test can kill it, where it changes nothing the source does (then it may survive).
    equivalent: str = ""


MUTANTS = [
    # ------------------------------------------------------------ acknowledgements and the acker
    Mutant(
        "proven acknowledgements forgotten after a minute",
        "source/pubsub/acknowledgements.py",
        "now + max(self._proven_memory, ANSWER_WINDOW_SECONDS)",
        "now + ANSWER_WINDOW_SECONDS",
        "a message Pub/Sub delivers again after its acknowledgement is yielded twice",
    ),
    Mutant(
        "an OK to an acknowledgement counts as proof after the lease lapsed",
        "source/pubsub/acknowledgements.py",
        "in_time = exactly_once or answered < c.proven_until",
        "in_time = True",
        "an acknowledgement that did not act is forgotten: the message comes back and is read twice",
    ),
    Mutant(
        "unproven acknowledgements remembered only as long as proven ones",
        "source/pubsub/acknowledgements.py",
        "self.remembered.add(sub, [m for _, m, _ in unproven], answered + self._unproven_memory)",
        "self.remembered.add(sub, [m for _, m, _ in unproven], answered + self._proven_memory)",
        "a message whose acknowledgement was lost comes back later and is read twice",
    ),
    Mutant(
        "the acker never releases an ordered key's hold",
        "source/pubsub/acker.py",
        "self._holding[jobs[0].sub] -= holding",
        "self._holding[jobs[0].sub] -= 0",
        "an AvailableNow run on an ordered subscription never ends",
    ),
    Mutant(
        "a hand-back sent as an acknowledgement",
        "source/pubsub/acker.py",
        "if kind == ACK:",
        "if kind in (ACK, NACK):",
        "messages handed back are acknowledged: lost",
    ),
    # ------------------------------------------------------------ leases
    Mutant(
        "renewals scheduled after the lease lapses",
        "source/pubsub/leaser.py",
        "c.renew_at = min(now + granted * random.uniform(*RENEW_FRACTION), c.lease_until - MIN_SLACK_SECONDS)",
        "c.renew_at = c.lease_until + MIN_SLACK_SECONDS",
        "every held message is delivered again once a lease",
    ),
    Mutant(
        "a renewal answered late proves the lease",
        "source/pubsub/leaser.py",
        "if ok and answered < c.proven_until:",
        "if ok:",
        "an acknowledgement after a lapse counts as proof: the message is read twice",
    ),
    Mutant(
        "a renewal shorter than the lease keeps the longer proof",
        "source/pubsub/leaser.py",
        "                    c.proven_until = sent + seconds\n",
        "                    c.proven_until = max(c.proven_until, sent + seconds)\n",
        "an acknowledgement after the shortened lease lapsed counts as proven: read twice (drawn_executors_posix_6567)",
        equivalent="since b40daee the proof shrinks to sent + seconds when the renewal is sent, and nothing raises it "
        "while the renewal is in flight (a delivery that refreshes the chunk keeps the smaller proof: the chunk "
        "has a fresh ack id, the one renewed), so at the answer max() picks sent + seconds all the same",
    ),
    Mutant(
        "a renewal in flight leaves the proof as it was",
        "source/pubsub/leaser.py",
        "                c.proven_until = min(c.proven_until, sent + seconds)  # it may act from now on\n",
        "                pass\n",
        "a slice recorded while a shortening renewal is in flight proves the longer lease: read twice "
        "(drawn_executors_posix_1238)",
    ),
    Mutant(
        "a commit whose answered marker is missing forgets its proven ids",
        "source/state/ledger.py",
        "if c.answered is not None or c.unconfirmed is not None:",
        "if c.answered is not None:",
        "a process lost between the two writes: the next one yields the redeliveries again (drawn_executors_gs_5838)",
    ),
    Mutant(
        "a batch's tasks share the plan, not the room the batches before it leave",
        "source/executors/mode.py",
        "        room = self._room_now(batch_id)\n",
        "        room = None\n",
        "a late commit: the next batch pulls beside the earlier one's messages (drawn_executors_posix_2719)",
    ),
    Mutant(
        "an answer proves the subscription drained while an earlier Pull is not taken",
        "source/pubsub/drained.py",
        "        return seen and not any(self._pulling.get((sub, slot), newest) < newest for slot in slots)",
        "        return seen",
        "an AvailableNow run ends with its backlog unread (drawn_driver_posix_5264)",
    ),
    Mutant(
        "a renewal's grant not recorded for a hand-back waiting on it",
        "source/pubsub/leaser.py",
        "c.lease_until = max(c.lease_until, answered + seconds)",
        "c.lease_until = max(c.lease_until, sent)",
        "a failed hand-back's shadow is short: an AvailableNow run ends with messages unread",
    ),
    Mutant(
        "a hand-back does not wait for a renewal in flight",
        "source/pubsub/leaser.py",
        "if handing_back and c in self._flying:",
        "if False:",
        "a renewal acts after the hand-back: messages leased to nobody while a run ends",
    ),
    Mutant(
        "a chunk refreshed by a new delivery takes the new proof",
        "source/pubsub/chunks.py",
        "self.proven_until = min(self.proven_until, proven_until) if had_fresh else proven_until",
        "self.proven_until = max(self.proven_until, proven_until) if had_fresh else proven_until",
        "messages whose lease is not proven are recorded (executors) or proven acknowledged",
    ),
    # ------------------------------------------------------------ the held index and the evidence
    Mutant(
        "a delivery of a held message not refreshed",
        "source/pubsub/held.py",
        "c.refresh(mid, ack_ids[i], proven)  # its newest ack id is the one that acts now",
        "pass  # its newest ack id is the one that acts now",
        "a message delivered again is acknowledged with a superseded ack id: it comes back",
    ),
    Mutant(
        "a remembered message taken as new",
        "source/pubsub/held.py",
        "elif seen is not None and seen[i]:",
        "elif False:",
        "a message delivered again after its acknowledgement is read twice",
    ),
    Mutant(
        "an ordered subscription's answer counts while messages are outstanding",
        "source/pubsub/drained.py",
        "if a is None or a.sent < since or a.sent < shadow or a.outstanding:",
        "if a is None or a.sent < since or a.sent < shadow:",
        "an AvailableNow run on an ordered subscription ends with keys unread",
    ),
    Mutant(
        "a shadow ignored",
        "source/pubsub/drained.py",
        "if a is None or a.sent < since or a.sent < shadow or a.outstanding:",
        "if a is None or a.sent < since or a.outstanding:",
        "an AvailableNow run ends while messages are leased to nobody",
    ),
    Mutant(
        "a failed hand-back leaves no shadow",
        "source/pubsub/drained.py",
        'if any(not reason.startswith("PERMANENT_FAILURE") for reason in failed.values()):',
        "if False:",
        "an AvailableNow run ends while handed-back messages are still leased",
    ),
    Mutant(
        "slots pull on during a shadow",
        "source/pubsub/drained.py",
        "        return shadow\n",
        "        return 0.0\n",
        "an AvailableNow run whose Pulls are answered late never ends",
    ),
    # ------------------------------------------------------------ receiver=driver
    Mutant(
        "flow control one over maxOutstandingMessages",
        "source/driver/flow.py",
        "count_room = self.max_messages - self.held_messages - self._reserved_messages",
        "count_room = self.max_messages - self.held_messages - self._reserved_messages + 1",
        "more than maxOutstandingMessages held",
    ),
    Mutant(
        "flow control's byte room forgets what is held",
        "source/driver/flow.py",
        "byte_room = self.max_bytes - self.held_bytes - self._reserved_bytes",
        "byte_room = self.max_bytes - self._reserved_bytes",
        "more than maxOutstandingBytes held",
    ),
    Mutant(
        "a batch one over maxMessagesPerTrigger",
        "source/driver/receiver.py",
        "n = min(n, max_messages - count)",
        "n = min(n, max_messages - count + 1)",
        "batches larger than maxMessagesPerTrigger",
    ),
    Mutant(
        "a lost hand-back of a Pull answered while stopping reported as done",
        "source/pubsub/holding.py",
        "                    self.drain.leased_at(sub, at)\n",
        "                    pass\n",
        "the next AvailableNow run ends with those messages unread",
    ),
    Mutant(
        "a hand-back never holds an ordered key back",
        "source/driver/receiver.py",
        "holds_keys = any(c.state != LATER for c in chunks)",
        "holds_keys = False",
        "an AvailableNow run on an ordered subscription ends with keys unread",
        equivalent="the receiver hands back messages published before a cutoff only while it stops, when no answer "
        "is read as evidence any more: every hand-back during a run is of later messages, which hold no key back",
    ),
    Mutant(
        "an ordered subscription's held messages not seen as outstanding",
        "source/driver/receiver.py",
        "outstanding = self._held.holds_earlier(sub)",
        "outstanding = False",
        "an AvailableNow run on an ordered subscription ends with keys unread",
    ),
    Mutant(
        "the batch after the committed one acknowledged too",
        "source/driver/mode.py",
        "done = sorted(b for b in self._sealed if b <= upto)",
        "done = sorted(b for b in self._sealed if b <= upto + 1)",
        "a batch acknowledged when it is planned, before Spark commits it",
        equivalent="the protocol proves a commit of upto (acknowledge(upto)) the first time a latestOffset or commit "
        "shows it, and latestOffset proves it before it plans upto + 1: no batch after upto is sealed then",
    ),
    # ------------------------------------------------------------ receiver=executors: tasks
    Mutant(
        "a task records messages whose lease it could not prove",
        "source/executors/task.py",
        "bound = time.monotonic() + RECORD_MARGIN_SECONDS",
        "bound = time.monotonic() - 60.0",
        "a message another task was delivered meanwhile is yielded twice",
    ),
    Mutant(
        "a task ignores what the driver says it must not yield",
        "source/executors/task.py",
        "self.roles[i][where[drop]] = REDELIVERY",
        "pass",
        "a message an earlier batch yielded is yielded again",
    ),
    Mutant(
        "a task's share does not count what it keeps",
        "source/executors/task.py",
        "self.kept += len(part_mids)",
        "self.kept += 0",
        "more than maxOutstandingMessages (and the trigger's limit) held",
    ),
    Mutant(
        "a slice yields what a slice registered before it keeps",
        "source/executors/task.py",
        "earlier = register[: register.index(order.index)]",
        "earlier = []",
        "a message two tasks of a batch pulled is yielded twice",
    ),
    Mutant(
        "a task pulls on after its claim may have lapsed",
        "source/executors/task.py",
        "                claim.check()\n",
        "                pass\n",
        "two attempts hold one slice's messages: more than the share",
    ),
    Mutant(
        "a replay pulls what its first run never read",
        "source/executors/task.py",
        "if table is None and order.replay:",
        "if table is None and False:",
        "a sink that kept the first run misses what the replay acknowledged: lost",
    ),
    Mutant(
        "a task's first Pull guesses ten messages",
        "source/executors/task.py",
        "return 0 if asked else max(1, min(count, FIRST_PULL_MESSAGES, self.order.max_bytes // MAX_MESSAGE_BYTES))",
        "return 0 if asked else max(1, min(count, FIRST_PULL_MESSAGES))",
        "batches far above maxBytesPerTrigger",
    ),
    Mutant(
        "a slice records the Pull's lease beyond the task's renewals",
        "source/executors/task.py",
        "        proven = min(proven, mono + self.order.lease_seconds)\n",
        "",
        "the driver judges an acknowledgement after the task's renewal shortened the lease proven: read twice "
        "(drawn_executors_posix_1238)",
    ),
    Mutant(
        "a task renews its leases after its claim may have lapsed",
        "source/executors/task.py",
        "may_renew=lambda: recorded.is_set() or claim.holds(),",
        "may_renew=None,",
        "an attempt frozen past its claim leases its messages past what the attempt that took over waits "
        "out: an AvailableNow run ends with them unread",
    ),
    Mutant(
        "an attempt that lost its slice releases its claim with no note",
        "source/executors/task.py",
        'claim.release(note={"leased_until": max([bound, *(e.shadow_until for e in pulled.evidence.values())])})',
        "claim.release()",
        "what it could not hand back stays leased to nobody and an AvailableNow run ends with it unread",
    ),
    # ------------------------------------------------------------ receiver=executors: the driver side
    Mutant(
        "the driver ignores the note of an attempt that lost its slice",
        "source/executors/mode.py",
        "self._drain.shadow(sub, noted)  # what",
        "self._drain.shadow(sub, 0.0)  # what",
        "what that attempt could not hand back stays leased to nobody and an AvailableNow run ends with it unread",
    ),
    Mutant(
        "slices that yielded nothing acknowledged with their batch",
        "source/executors/mode.py",
        "chunks = [c for s in done for c in s.chunks]",
        "chunks = [c for s in [*done, *unregistered] for c in s.chunks]",
        "messages of a task that never yielded are acknowledged: lost",
    ),
    Mutant(
        "later rows of a slice read at its commit not leased",
        "source/executors/mode.py",
        "held = chunks + later if lease else later",
        "held = chunks + later if lease else []",
        "messages published after an AvailableNow run began are delivered again and again",
    ),
    Mutant(
        "a commit counts only the driver's own renewals in its messages' leases",
        "source/executors/mode.py",
        "            time.monotonic() + self._opts.ackDeadlineSeconds + MODIFY_DEADLINE.total,\n",
        "            0.0,\n",
        "a failed hand-back's shadow ends before the lease a task renewed: an AvailableNow run ends with messages "
        "unread (drawn_executors_posix_408)",
    ),
    Mutant(
        "later messages' bytes not counted",
        "source/executors/mode.py",
        "if later * 2 >= bound or later_bytes * 2 >= bound_bytes:",
        "if later * 2 >= bound:",
        "an AvailableNow run holds more than maxOutstandingBytes",
        equivalent="for the promise: the room a batch plans subtracts the later messages' bytes all the same, so "
        "the bound holds (by one message a task); without their hand-back the run only goes slower",
    ),
    Mutant(
        "an ordered subscription pulled by every task of a batch",
        "source/executors/orders.py",
        "return (shared[index % len(shared)],) if shared else ()",
        "return (subs[index % len(subs)],)",
        "a key's messages reach the sink out of order",
    ),
    # ------------------------------------------------------------ the protocol, the ledger, the storages
    Mutant(
        "latestOffset asked again plans again",
        "source/core/protocol.py",
        "if start is not None and self._answered is not None and self._answered[0] == base:",
        "if False:",
        "a second batch under one number: the query stops on its own record",
    ),
    Mutant(
        "recovered unconfirmed acknowledgements forgotten",
        "source/state/ledger.py",
        "                if table is not None:\n                    out.unconfirmed.extend(_by_sub(table, with_ack_ids=True))",
        "                if table is not None:\n                    pass",
        "a message whose acknowledgement an earlier process could not prove is read twice",
    ),
    Mutant(
        "an earlier process's leases not waited out",
        "source/state/ledger.py",
        "out = Recovered(leased_until=self._predecessor_leases())",
        "out = Recovered(leased_until=0.0)",
        "an AvailableNow run ends while an earlier process's messages are still leased",
    ),
    Mutant(
        "a lease within its clock margin still allows writes",
        "source/storage/lease.py",
        "if now >= self._expiry - self.margin:",
        "if now >= self._expiry + self.margin:",
        "two holders write one stateDir",
    ),
    Mutant(
        "a write-once create that overwrites (POSIX)",
        "source/storage/posix.py",
        "            os.link(tmp, path)\n",
        "            os.replace(tmp, path)\n",
        "two attempts both record a slice; two processes both record a batch",
    ),
]
