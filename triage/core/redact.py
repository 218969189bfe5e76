"""Redaction of secrets in anything triage prints, saves or sends to a bug report: the one owner.

Pure functions, used at every output boundary: the terminal and JSON of every command (main.py
wraps stdout and stderr), probe evidence, the TUI's screens and its exported report, log evidence.
Redaction errs on the side of hiding: a false positive costs a value nobody needed, a false
negative leaks a key into a pasted issue. It does not touch what merely looks like a secret and
is needed for a diagnosis: commit hashes, UUIDs, NCCL ids, digests, ports, addresses.

`redact_text` makes passes over the text, each for one shape, so that shapes nested in one another
are all seen (a `?token=` inside a URL, a password inside a JSON string, a key inside a PEM block):

1. private key blocks (PEM, OpenSSH, PGP; also written with `\\n` escapes inside JSON);
2. HTTP headers: Authorization, Cookie, Set-Cookie, X-Api-Key;
3. URLs: the password of `user:password@host` (which may hold `@` or `/`), a DSN's key, and query
   parameters with secret names (`?token=`, `&sig=` of an Azure SAS, `X-Amz-Signature`);
4. token formats that are secrets wherever they appear (hf_, ghp_, sk-, xoxb-, AKIA..., a JWT,
   ya29., npm_, pypi-, SendGrid, Slack webhooks, a bare AWS secret key...);
5. command lines: `--password X`, `--api-key X`, `curl -u user:pw`, `mysql -pX`, `wandb login KEY`;
6. `NAME=value`, `NAME: value`, `"NAME": "value"` where the name says secret; a quoted value is
   hidden up to its closing quote, spaces and all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing on every run
if TYPE_CHECKING:
    from typing import Any, TextIO

REDACTED = "<redacted>"


def _lazy(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A regex compiled on first use (the command line imports this module for every command)."""
    compiled: list[re.Pattern[str]] = []

    def get() -> re.Pattern[str]:
        if not compiled:
            compiled.append(re.compile(pattern, flags))
        return compiled[0]

    return get


# A name says "secret" when it holds one of these words (case-insensitive) once the benign words
# that contain them are taken out: TOKENIZERS_PARALLELISM, AUTHOR, KEYBOARD, max_tokens, num_keys.
SECRET_NAME = _lazy(
    r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|[_\-.]PWD$|[_\-.]PASS$"
    r"|PRIVATE",
    re.IGNORECASE,
)
_BENIGN = _lazy(
    r"TOKENI[ZS]ERS?|AUTHORS?(?!IZ)|KEYBOARD|MONKEY|HOTKEYS?|(?:MAX|MIN|NUM|TOTAL|INPUT|OUTPUT|NEW|PROMPT|N)"
    r"[_\-]?(?:TOKENS?|KEYS?)|^(?:KEYS|TOKENS)$|SORT[_\-]?KEYS?|^\w*(?:Error|Exception|Warning)$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True when a variable, key, flag or parameter name says its value is a secret."""
    return bool(SECRET_NAME().search(_BENIGN().sub("", name)))


def redact_value(name: str, value: str) -> str:
    """The value of variable `name` as it may be shown."""
    if is_secret_name(name) and value:
        return REDACTED
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment with every secret value replaced."""
    return {name: redact_value(name, value) for name, value in env.items()}


# -- 1. private keys ------------------------------------------------------------------------
# Redaction also runs over JSON documents (the commands' --json output), so no match may end inside
# an escape (`\"`, `\\`) or run past a string's closing quote: the JSON stays valid.
_CHAR = r"(?:[^\s\"'\\]|\\(?![\"\\nrt]))"  # a value character: no quote, no escape of one, no \n
_IN_STRING = r"(?:[^\"\\]|\\+(?![\"\\]))"  # any character up to a quote, real or escaped
_KEY_BLOCK = _lazy(
    r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    rf"(?:{_IN_STRING}{{0,20000}}?-----END[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----|{_IN_STRING}{{0,20000}})",
)

# -- 2. headers -----------------------------------------------------------------------------
_HEADER = _lazy(
    r"(?P<head>\b(?:Proxy-)?Authorization\s*:\s*(?:(?:Bearer|Basic|Token|Digest|Bot|AWS4-HMAC-SHA256)\s+)?"
    r"|\b(?:Set-)?Cookie\s*:\s*|\bX-(?:Api|Auth)-(?:Key|Token)\s*:\s*)(?P<value>(?:[^\r\n\"'\\]|\\(?![\"\\])){1,4000})",
    re.IGNORECASE,
)
_BEARER = _lazy(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{8,})")

# -- 3. URLs --------------------------------------------------------------------------------
_URL_PASSWORD = _lazy(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/@]{0,256}:)(?!\d{1,5}(?:/|$))"
    rf"(?P<pw>{_CHAR}{{1,512}}?)(?P<at>@)(?=[A-Za-z0-9\-.\[\]]{{1,256}}(?::\d{{1,5}})?(?:[/?#\s\"'<>),]|$))"
)
_URL_KEY = _lazy(r"(?P<head>://)(?P<key>[A-Za-z0-9_\-]{20,128})(?P<at>@)")  # a DSN's key, no password
_QUERY = _lazy(
    rf"(?P<lead>[?&;])(?P<name>[A-Za-z][A-Za-z0-9_.\-]{{0,64}})=(?P<value>(?:(?![&#<>]){_CHAR}){{1,4096}})"
)
_QUERY_SECRETS = frozenset({"sig", "signature", "code", "client_secret", "x-amz-signature"})

# -- 4. token formats -----------------------------------------------------------------------
_TOKEN_PATTERNS: tuple[str, ...] = (
    r"hf_[A-Za-z0-9]{16,}",  # Hugging Face
    r"api_org_[A-Za-z0-9]{16,}",  # Hugging Face organisation
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub personal, OAuth, user-to-server, server, refresh
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"sk-[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic style (sk-..., sk-proj-..., sk-ant-...)
    r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"xox[abposre]-[A-Za-z0-9\-]{10,}",  # Slack
    r"xapp-\d-[A-Za-z0-9\-]{10,}",  # Slack app-level
    r"glpat-[A-Za-z0-9_\-]{16,}",  # GitLab
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}",  # AWS access key id
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google API key
    r"ya29\.[0-9A-Za-z_\-]{20,}",  # Google OAuth access token
    r"1//0[0-9A-Za-z_\-]{30,}",  # Google OAuth refresh token
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
    r"npm_[A-Za-z0-9]{30,}",  # npm
    r"pypi-[A-Za-z0-9_\-]{40,}",  # PyPI
    r"dapi[0-9a-f]{32}(?:-\d)?",  # Databricks
    r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",  # SendGrid
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{16,}",  # Slack webhook
    r"discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{20,}",  # Discord webhook
    r"wandb_v1_[A-Za-z0-9_]{20,}",  # Weights & Biases (new format)
    r"(?:LTAI|lsv2_(?:pt|sk)_)[A-Za-z0-9_]{16,}",  # Alibaba access key, LangSmith
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"dop_v1_[a-f0-9]{64}",  # DigitalOcean
    r"hvs\.[A-Za-z0-9_\-]{24,}",  # HashiCorp Vault
)
_TOKEN = _lazy(r"(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_PATTERNS) + r")")
# Lower-case text every token format starts with (or holds): the token pass runs only when one is there.
_TOKEN_NEEDLES = (
    "hf_",
    "api_org_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "sk-",
    "k_live_",
    "k_test_",
    "xox",
    "xapp-",
    "glpat-",
    "akia",
    "asia",
    "agpa",
    "aida",
    "aroa",
    "anpa",
    "aiza",
    "ya29.",
    "1//0",
    "eyj",
    "npm_",
    "pypi-",
    "dapi",
    "sg.",
    "hooks.slack.com",
    "discord",
    "wandb_v1_",
    "ltai",
    "lsv2_",
    "shpat_",
    "shpca_",
    "shppa_",
    "shpss_",
    "dop_v1_",
    "hvs.",
)
# A bare AWS secret access key: 40 characters of base64 with upper and lower case and a digit or
# sign; a commit hash (40 lower-case hex) never has an upper-case letter.
_AWS_SECRET = _lazy(
    r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
    r"(?=[A-Za-z0-9/+]{0,39}[0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
)

# -- 5. command lines -------------------------------------------------------------------------
# A quoted value: "...", '...', or quoted with escaped quotes inside a JSON string (\"...\",
# \\\"...\\\" a level deeper): hidden up to its closing quote, spaces and all.
_QUOTED = (
    r"\"(?:[^\"\\\n]|\\.){0,4096}\"|'[^'\n]{0,4096}'|(?P<esc>\\+)\"(?:(?!(?P=esc)\").){0,4096}(?P=esc)\""
)
_FLAG = _lazy(
    r"(?P<flag>(?<![\w\-])--?[A-Za-z][A-Za-z0-9_\-.]{0,64})(?P<sep>[ \t]+|=)"
    rf"(?P<value>{_QUOTED}|(?!-){_CHAR}{{1,4096}})"
)
_USER_PASSWORD = _lazy(rf"(?P<head>(?<![\w\-])(?:-u|--user)\s+[^\s:]{{1,256}}:)(?P<pw>{_CHAR}{{1,1024}})")
_MYSQL_PASSWORD = _lazy(
    rf"(?P<head>\b(?:mysql\w{{0,10}}|mariadb\w{{0,10}})\b[^\n]{{0,1024}}?(?<![\w\-])-p)(?P<pw>(?!-){_CHAR}{{1,1024}})"
)
_LOGIN_KEY = _lazy(r"(?P<head>\bwandb\s+login\s+(?:--?[\w\-]+\s+){0,4})(?P<key>[0-9a-f]{40}\b)")

# -- 6. assignments -------------------------------------------------------------------------
_ASSIGNMENT = _lazy(
    r"(?P<name>(?<![A-Za-z0-9_.\-/\\])[A-Za-z_][A-Za-z0-9_.\-]{0,128})"  # not a path's last part
    r"(?P<sep>(?:\\*[\"'])?[ \t]{0,16}(?:=|:(?!//))[ \t]{0,16})"
    rf"(?P<value>{_QUOTED}|(?:(?![,;}}&`]){_CHAR}){{1,4096}})"
)
# Values that stand for a secret without being one: `$HF_TOKEN`, `<your key>`, `KEY=value`; and the
# status words of messages about one (`token: not set`, `Authentication: failed`).
_PLACEHOLDER = _lazy(
    r"^[\"']?(?:\$\{?\w+\}?|<[^<>]{0,64}>|value|\.\.\.|…|x{3,}|\*{3,}|none|null|true|false"
    r"|not|no|set|unset|empty|missing|required|invalid|expired|failed|failure|denied|error)[\"']?$",
    re.IGNORECASE,
)


# Punctuation that ends a sentence or a list around an unquoted value (`token=abc123,`, `(key=abc)`,
# `see HF_TOKEN=abc.`): it stays in the output after the mark. A secret that really ends in one of
# these shows that character, which is cheaper than output whose commas and brackets vanish.
_TRAILING = ".,;:)]}>'\""
_OPENER = {")": "(", "]": "[", "}": "{", ">": "<"}


def _split_tail(value: str) -> tuple[str, str]:
    """An unquoted value less the punctuation after it: (the value, the punctuation). A closing
    bracket stays in the value when the value opened it (`pa(ss)`)."""
    end = len(value)
    while end > 0 and value[end - 1] in _TRAILING:
        char = value[end - 1]
        opener = _OPENER.get(char)
        if opener is not None and value.count(opener, 0, end) >= value.count(char, 0, end):
            break
        end -= 1
    return value[:end], value[end:]


def _keep_head(match: re.Match[str]) -> str:
    rest = match[0][len(match["head"]) :]
    if rest.startswith(REDACTED):
        return match[0]
    value, tail = _split_tail(rest)
    return match[0] if not value else f"{match['head']}{REDACTED}{tail}"


def _url_password(match: re.Match[str]) -> str:
    return f"{match['head']}{REDACTED}{match['at']}"


def _url_key(match: re.Match[str]) -> str:
    return f"{match['head']}{REDACTED}{match['at']}"


def _query(match: re.Match[str]) -> str:
    name = match["name"]
    value, tail = _split_tail(match["value"])
    if not value or value == REDACTED or not (is_secret_name(name) or name.lower() in _QUERY_SECRETS):
        return match[0]
    return f"{match['lead']}{name}={REDACTED}{tail}"


def _quoted_redacted(value: str) -> str | None:
    """The value hidden: a quoted one keeps its quotes, an unquoted one the punctuation after it;
    None when nothing of it is left to hide."""
    escape = value[: len(value) - len(value.lstrip("\\"))]
    if (
        escape
        and value.startswith(escape + '"')
        and value.endswith(escape + '"')
        and len(value) > 2 * len(escape) + 1
    ):
        return f'{escape}"{REDACTED}{escape}"'
    if len(value) >= 2 and value[0] in "\"'" and value[-1] == value[0]:
        return f"{value[0]}{REDACTED}{value[0]}"
    value, tail = _split_tail(value)
    return f"{REDACTED}{tail}" if value else None


def _placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER().match(value) or _PLACEHOLDER().match(_split_tail(value)[0]))


# Authorization schemes: `Authorization: Bearer <redacted>` keeps its scheme once the token is hidden.
_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "bot", "aws4-hmac-sha256"})


def _flag(match: re.Match[str]) -> str | None:
    value = match["value"]
    if not is_secret_name(match["flag"].lstrip("-")) or REDACTED in value or _placeholder(value):
        return None
    hidden = _quoted_redacted(value)
    return None if hidden is None else f"{match['flag']}{match['sep']}{hidden}"


def _assignment(match: re.Match[str]) -> str | None:
    value = match["value"]
    if (
        not is_secret_name(match["name"])
        or REDACTED in value
        or _placeholder(value)
        or not value.strip("\"'")
        or (value.lower() in _SCHEMES and match.string[match.end() :].lstrip(" \t").startswith(REDACTED))
    ):
        return None
    hidden = _quoted_redacted(value)
    return None if hidden is None else f"{match['name']}{match['sep']}{hidden}"


class _Inside:
    """A replacement for name-value patterns: when the name is not a secret's it returns None, and
    the value is searched again, since it can hold a secret of its own (`"text": "HF_TOKEN=..."`,
    `--note "password=..."`): name=value runs overlap."""

    def __init__(self, decide: Callable[[re.Match[str]], str | None]) -> None:
        self.decide = decide

    def sub(self, regex: re.Pattern[str], text: str) -> str:
        out: list[str] = []
        pos = 0
        while (match := regex.search(text, pos)) is not None:
            replaced = self.decide(match)
            if replaced is None:
                resume = max(match.start("value"), match.start() + 1)
                out.append(text[pos:resume])
                pos = resume
                continue
            out.append(text[pos : match.start()])
            out.append(replaced)
            pos = match.end()
        out.append(text[pos:])
        return "".join(out)


# What the lower-cased text of a name-value pair must hold for the pair to be redacted: each of
# SECRET_NAME's words holds one of these (password, passwd, passphrase: "pass").
_SECRET_WORDS = ("token", "key", "secret", "pass", "pwd", "credential", "auth", "cookie", "private")

# (pattern, replacement, needles): a pass runs only when the lower-cased text holds one of its
# needles, and each pattern is compiled on first use, so that a command whose output holds no
# secret-like text (most `triage ask` answers) pays for a few substring tests, not for compiling
# every pattern.
_Replacement = str | Callable[[re.Match[str]], str] | _Inside
_PASSES: tuple[tuple[Callable[[], re.Pattern[str]], _Replacement, tuple[str, ...]], ...] = (
    (_KEY_BLOCK, REDACTED, ("private key",)),
    (_HEADER, _keep_head, ("authorization", "cookie", "x-api-", "x-auth-")),
    (_URL_PASSWORD, _url_password, ("://",)),
    (_URL_KEY, _url_key, ("://",)),
    (_QUERY, _query, (*_SECRET_WORDS, "sig", "code")),
    (_TOKEN, REDACTED, _TOKEN_NEEDLES),
    (_AWS_SECRET, REDACTED, ("",)),
    (_BEARER, _keep_head, ("bearer", "basic")),
    (_USER_PASSWORD, _keep_head, ("-u", "--user")),
    (_MYSQL_PASSWORD, _keep_head, ("mysql", "mariadb")),
    (_LOGIN_KEY, _keep_head, ("wandb",)),
    (_FLAG, _Inside(_flag), _SECRET_WORDS),
    (_ASSIGNMENT, _Inside(_assignment), _SECRET_WORDS),
)
_MAYBE = _lazy(r"[=:@]|PRIVATE KEY|[A-Za-z0-9/+]{16}|-[A-Za-z]", re.IGNORECASE)


def redact_text(text: str) -> str:
    """Free text (command output, a log line, a config file, a report) with secrets replaced."""
    # (=, : or @ is enough for _MAYBE: most output has one, and then _MAYBE need not be compiled.)
    if not text or not ("=" in text or ":" in text or "@" in text or _MAYBE().search(text)):
        return text
    lowered = text.lower()
    for pattern, replacement, needles in _PASSES:
        if any(needle in lowered for needle in needles):
            if isinstance(replacement, _Inside):
                text = replacement.sub(pattern(), text)
            else:
                text = pattern().sub(replacement, text)
    return text


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


class RedactingStream:
    """A text stream that redacts whatever is written through it: the command line's stdout and
    stderr, so no command can print a secret, whatever the code path (one write is one text:
    print, json.dumps, a report)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact_text(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
