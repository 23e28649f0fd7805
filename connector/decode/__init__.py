"""Decoding: Pub/Sub message bodies (every CockroachDB and Debezium envelope) to Arrow columns.

``decoder`` orchestrates a batch: the envelope families' fast paths first (each in its family's
module under ``envelopes/families``; bulk Arrow helpers in ``columns``), the general path
``envelopes`` (one body of any envelope) for the rest. The learned-layout machinery the bare,
enriched and Debezium fast paths share: ``layouts`` (a layout, where it sits, learning it from a
body), ``proofs`` (a body is its layout's canonical bytes), ``matching`` (a batch's bodies matched
to layouts and proven), ``rowcolumns`` (output columns from the raw JSON texts matched), ``topics``
(v2 bodies grouped by topic) and ``passes`` (a family's learned fast path, one pass per frame).
``typed`` builds typed row images; ``ddl`` parses the rowSchema DDL; ``inference`` derives one from
an enriched message's schema; ``schema`` is the output contract (the 19 columns); ``vocabulary`` and
``hlc`` define the words and the HLC grammar once.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .decoder import ENVELOPES, MODES, DecodeStats, MalformedMessageError, decode_messages, schema_from_enriched

__all__ = ["ENVELOPES", "MODES", "DecodeStats", "MalformedMessageError", "decode_messages", "schema_from_enriched"]


def __getattr__(name: str) -> Any:
    # Imported when first used (PEP 562): ``crdb_pubsub.decode.vocabulary`` and ``.ddl`` (the source's
    # options) come without the decoder, whose first ``pa.array`` imports pandas; Spark's driver-side
    # runner, which never decodes, starts ~0.5 s sooner.
    if name in __all__:
        from . import decoder

        value = getattr(decoder, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
