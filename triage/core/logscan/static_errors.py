"""Errors Python raises because of how the code is written, whatever the data or the rank.

- a call that does not fit the callee's signature: `on_epoch_end() takes 2 positional arguments but
  3 were given`, `missing 1 required positional argument: 'x'`, `got an unexpected keyword argument`;
- a name, or an attribute of an object's type, that the code uses and that does not exist:
  `NameError: name 'cfg' is not defined`, `'Tensor' object has no attribute 'logits'`;
- a value formatted with a spec its type has none for: `unsupported format string passed to
  Tensor.__format__`, or written with a library that has no encoding for its type: `Object of type
  Tensor is not JSON serializable` (the code chose the value's type, not the data);
- a class the interpreter refuses to define: a dataclass field with a mutable default (`mutable
  default <class 'list'> for field milestones is not allowed`), raised while the class statement
  runs;
- a tensor of the wrong number of dimensions or dtype for an op (`0D or 1D target tensor expected,
  multi-target not supported`, `expected scalar type Float but found Double`): the code builds
  every rank's tensors the same way, where a size (`mat1 and mat2 shapes cannot be multiplied`)
  may come from one rank's data and is left out.

Every rank runs the same code, so every rank fails the same way at the same line: as with a call
torch's own check refused (blocks.Block.refused), the rank that printed it first did not diverge
from the others, and the query engine's weak reading of the message's words (`attribute`, `format`)
names no entry. The signatures still read the message: an attribute missing from a library's object
(`'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`, a half-built extension) is theirs.
`'NoneType' object has no attribute` is left out: a None usually comes from the data (a sample, a
lookup that found nothing), which may differ by rank.
"""

from __future__ import annotations

import re

_STATIC = {
    "TypeError": re.compile(
        r"takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:was|were) given"
        r"|missing \d+ required (?:positional|keyword-only) arguments?"
        r"|got an unexpected keyword argument"
        r"|unsupported format string passed to \w+\.__format__"
        r"|^Object of type \w+ is not JSON serializable"
    ),
    "ValueError": re.compile(r"^mutable default <class '\w+'> for field \w+ is not allowed"),
    "NameError": re.compile(r"name '\w+' is not defined"),
    "AttributeError": re.compile(r"^'(?!NoneType')\w+' object has no attribute '\w+'"),
    "RuntimeError": re.compile(
        r"^\d+D(?: or \d+D)? (?:input|target)(?: tensor)? expected"
        r"|^[Ee]xpected (?:\d+D|\d+-dimensional) (?:input|target|tensor)"
        r"|^expected scalar type \w+ but found \w+"
        r"|^[Ff]ound dtype \w+ but expected \w+"
    ),
}


def static_error(exception_class: str, message: str) -> bool:
    """An exception of this class saying `message` comes from the code as written, not its data."""
    pattern = _STATIC.get(exception_class.rsplit(".", 1)[-1])
    return pattern is not None and pattern.search(message.strip()) is not None
