"""Decoding: Pub/Sub message bodies (every CockroachDB and Debezium envelope) to Arrow columns.

``decoder`` orchestrates a batch: the envelope families' fast paths first (each in its family's
module under ``envelopes/families``; the learned-layout machinery they share in ``fast_learned``,
bulk Arrow helpers in ``columns``), the general path ``envelopes`` (one body of any envelope) for the
rest; ``typed`` builds typed row images; ``ddl`` parses the rowSchema DDL; ``inference`` derives one
from an enriched message's schema; ``schema`` is the output contract (the 19 columns);
``vocabulary`` and ``hlc`` define the words and the HLC grammar once.
"""

from .decoder import ENVELOPES, MODES, DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched

__all__ = ["ENVELOPES", "MODES", "DecodeStats", "MalformedMessageError", "decode_messages", "schema_from_enriched"]
