"""The point-to-point wait a transport timeout names when the traceback names no collective.

gloo reports a wait that ran out as `Timed out waiting 10000ms for send operation to complete`
(or `recv`). Inside a collective the traceback's frames in torch.distributed already say which
collective the rank was in, and the transport's send or recv is only a step of it. A traceback
that ends in the user's own line instead (`req.wait()` on the handles of `isend`, `irecv` or
`batch_isend_irecv`, whose wait is C++ with no Python frame) leaves the transport's words as the
only account of where the rank waited: a send, or a recv, at that line.
"""

from __future__ import annotations

import re

_TRANSPORT_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for (?P<op>send|recv) operation to complete")


def transport_wait(message: str) -> str | None:
    """`send` or `recv` when `message` is the transport's timeout of that operation, else None."""
    found = _TRANSPORT_TIMEOUT.search(message)
    return found["op"] if found is not None else None
