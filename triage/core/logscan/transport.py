"""The point-to-point wait a transport timeout names when the traceback names no collective.

gloo reports a wait that ran out as `Timed out waiting 10000ms for send operation to complete`
(or `recv`). Inside a collective the traceback's frames in torch.distributed already say which
collective the rank was in, and the transport's send or recv is only a step of it. A traceback
that ends in the user's own line instead (`req.wait()` on the handles of `isend`, `irecv` or
`batch_isend_irecv`, whose wait is C++ with no Python frame) leaves the transport's words as the
only account of where the rank waited: a send, or a recv, at that line.

A key-value store's `wait timeout after 10000ms, keys: /best_ckpt` under the user's own line
(`store.get(key)`, `store.wait([key])`, C++ with no Python frame) is the same kind of wait: the rank
waited for a key another rank was to set, a meeting point of the program's own making. Raised under
torch's frames (init_process_group's rendezvous, `/default_pg/...`) it is torch's wait, not this.
"""

from __future__ import annotations

import re

_TRANSPORT_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for (?P<op>send|recv) operation to complete")


_STORE_KEY_TIMEOUT = re.compile(r"wait timeout after \d+ ?ms, keys: ")
STORE_WAIT = "store.get"


def store_wait(message: str) -> str | None:
    """`store.get` when `message` is a store's timeout waiting for a key, else None."""
    return STORE_WAIT if _STORE_KEY_TIMEOUT.search(message) else None


def transport_wait(message: str) -> str | None:
    """`send` or `recv` when `message` is the transport's timeout of that operation, else None."""
    found = _TRANSPORT_TIMEOUT.search(message)
    return found["op"] if found is not None else None
