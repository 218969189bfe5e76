"""Redaction of secrets in anything triage prints, saves or sends to a bug report.

Pure functions, shared by the probes (their evidence), `triage probe --json` and the TUI's report
export. Two rules: a variable whose *name* says it holds a secret (TOKEN, KEY, SECRET, PASSWORD,
PASSWD, CREDENTIAL, AUTH) has its value replaced, and any *value* that looks like a known token
format (hf_..., ghp_..., sk-..., AKIA..., a JWT, a password in a URL) is replaced wherever it appears.
Redaction errs on the side of hiding: a false positive costs a value nobody needed, a false negative
leaks a key into a pasted issue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
# Names that contain a secret word but hold none: TOKENIZERS_PARALLELISM, AUTHOR, "keys:" in torch's
# store errors, max_tokens. Kept visible because they matter to a diagnosis.
_BENIGN_NAME = re.compile(r"TOKENIZER|AUTHOR|KEYBOARD|(?:KEYS|TOKENS)$", re.IGNORECASE)

# Token formats that are secrets wherever they appear, whatever variable or line holds them.
_TOKEN_PATTERNS: tuple[str, ...] = (
    r"hf_[A-Za-z0-9]{16,}",  # Hugging Face
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub personal, OAuth, user-to-server, server, refresh
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"sk-[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic style (sk-..., sk-proj-..., sk-ant-...)
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
    r"glpat-[A-Za-z0-9_\-]{16,}",  # GitLab
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key id
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google API key
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
)
_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_PATTERNS) + r")")

# user:password@ in a URL (https://user:pw@host, redis://:pw@host).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<pw>[^\s@/]+)(?P<at>@)")

# NAME=value, NAME: value, "NAME": "value", --name=value where the name says secret.
_ASSIGNMENT = re.compile(
    r"""(?P<name>(?<![A-Za-z0-9_])-{0,2}[A-Za-z_][A-Za-z0-9_\-]*)"""
    r"""(?P<sep>["']?\s*[=:]\s*)"""
    r"""(?P<quote>["']?)(?P<value>[^\s"',;}]+)"""
)

# "Authorization: Bearer <token>" and "Basic <base64>".
_BEARER = re.compile(
    r"(?P<head>\b(?:Bearer|Basic|Token)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{8,})", re.IGNORECASE
)


def is_secret_name(name: str) -> bool:
    """True when a variable or key name says its value is a secret."""
    return bool(SECRET_NAME.search(name)) and not _BENIGN_NAME.search(name)


def redact_value(name: str, value: str) -> str:
    """The value of variable `name` as it may be shown."""
    if is_secret_name(name) and value:
        return REDACTED
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment with every secret value replaced."""
    return {name: redact_value(name, value) for name, value in env.items()}


def redact_text(text: str) -> str:
    """Free text (command output, a log, a config file) with secrets replaced."""
    if not text:
        return text
    text = _TOKEN.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}{m['at']}", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{REDACTED}", text)

    def assignment(match: re.Match[str]) -> str:
        name = match["name"].lstrip("-")
        if not is_secret_name(name) or match["value"] == REDACTED:
            return match[0]
        return f"{match['name']}{match['sep']}{match['quote']}{REDACTED}"

    return _ASSIGNMENT.sub(assignment, text)


def redact_obj(obj: object, key: str = "") -> object:
    """A JSON-like structure (dicts, lists, strings) with secrets replaced, keys kept.

    A string under a key whose name says secret is replaced whole; every other string goes through
    redact_text. Numbers, bools and None pass unchanged.
    """
    if isinstance(obj, str):
        return REDACTED if key and is_secret_name(key) and obj else redact_text(obj)
    if isinstance(obj, Mapping):
        return {k: redact_obj(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(item, key) for item in obj]
    return obj
