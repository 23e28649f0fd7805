"""Decoding: Pub/Sub message bodies (every CockroachDB and Debezium envelope) to Arrow columns.

``decoder`` orchestrates a batch (fast paths first, the general path for the rest); ``envelopes``
reads one body of any envelope; ``typed`` builds typed row images; ``ddl`` parses the rowSchema
DDL; ``schema`` is the output contract (the 19 columns).
"""

from .decoder import ENVELOPES, MODES, DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched

__all__ = ["ENVELOPES", "MODES", "DecodeStats", "MalformedMessageError", "decode_messages", "schema_from_enriched"]
