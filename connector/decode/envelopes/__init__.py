"""The careful, general decoder: one Pub/Sub message body in, change rows (or a reason) out.

This path handles every envelope and every oddity; :mod:`crdb_pubsub.decode.decoder` only sends
here the messages its fast paths could not prove canonical.

* :mod:`.common`: the row, the error and the field readers every family uses;
* :mod:`.body`: the body's outer layers, then the registry;
* :mod:`.wrappers`: the Pub/Sub sink's wrapper and the sinkless result row;
* :mod:`.registry`: finds the families and dispatches a value to the first that claims it;
* :mod:`.families`: one module per envelope family.

Everything wrong with a message raises :class:`Bad` with a reason naming the field and the problem;
the caller turns it into a malformed row (or drops it, or fails, by mode).
"""

from ..hlc import hlc_to_micros
from .body import decode_body
from .common import Bad, Context, Row, parse_object, table_from_topic

__all__ = ["Bad", "Context", "Row", "decode_body", "hlc_to_micros", "parse_object", "table_from_topic"]
