"""triage.core.redact: secrets never reach output, and ordinary diagnostic text survives."""

from __future__ import annotations

import json
import re

import pytest

from tests.secrets_corpus import LOOKALIKES, SHAPES, Shape
from triage.core.redact import REDACTED, is_secret_name, redact_env, redact_obj, redact_text, redact_value

HF = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
SK = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3"
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "FTP_PASSWD",
        "GOOGLE_CREDENTIALS",
        "BASIC_AUTH",
        "hf_token",
        "NCCL_IB_PKEY",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)
    assert redact_value(name, "value-123") == REDACTED


@pytest.mark.parametrize(
    "name", ["TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "MASTER_PORT", "AUTHOR", "keys", "max_tokens", "PATH"]
)
def test_names_that_are_not_secrets_keep_their_values(name: str) -> None:
    assert not is_secret_name(name)
    assert redact_value(name, "false") == "false"


@pytest.mark.parametrize(
    "token", [HF, GHP, SK, AWS, JWT, "xoxb-1234567890-abcdefghij", "glpat-abcdefghij0123456789"]
)
def test_token_values_are_redacted_wherever_they_appear(token: str) -> None:
    text = f"export SOMETHING={token} and again ({token})"
    out = redact_text(text)
    assert token not in out
    assert out.count(REDACTED) == 2
    assert out.startswith("export SOMETHING=")


def test_passwords_in_urls_and_bearer_headers() -> None:
    out = redact_text(
        "push to https://alice:s3cr3tpw@git.example.com/repo.git\nAuthorization: Bearer abcdef123456789"
    )
    assert "s3cr3tpw" not in out and "abcdef123456789" not in out
    assert "https://alice:" in out and "@git.example.com/repo.git" in out


def test_assignments_by_name_in_free_text() -> None:
    text = 'WANDB_API_KEY=0123456789abcdef api_key: "xyz987" --hf-token=abc "password": "hunter2" NCCL_DEBUG=INFO'
    out = redact_text(text)
    for secret in ("0123456789abcdef", "xyz987", 'abc"', "hunter2"):
        assert secret not in out
    assert "--hf-token=" in out
    assert "NCCL_DEBUG=INFO" in out


def test_ordinary_diagnostics_survive() -> None:
    text = (
        "DistStoreError: wait timeout after 11000ms, keys: /default_pg//0//cpu//0/1\n"
        "TOKENIZERS_PARALLELISM=false NCCL_SOCKET_IFNAME=eth0 MASTER_ADDR=10.0.0.1 sk-learn is fine"
    )
    assert redact_text(text) == text


def test_redact_env_and_nested_objects() -> None:
    env = {"HF_TOKEN": HF, "NCCL_DEBUG": "INFO", "EXTRA": f"url https://u:pw1234@h/ {GHP}"}
    red = redact_env(env)
    assert red["HF_TOKEN"] == REDACTED and red["NCCL_DEBUG"] == "INFO"
    assert "pw1234" not in red["EXTRA"] and GHP not in red["EXTRA"]
    doc = {
        "probes": [{"evidence": [{"output": f"HF_TOKEN={HF}"}], "facts": {"env.world_size": 8, "ok": True}}],
        "secret": "plain-looking",
        "nested": {"api_key": ["a1", "b2"]},
    }
    out = redact_obj(doc)
    dumped = json.dumps(out)
    assert HF not in dumped and "plain-looking" not in dumped and "a1" not in dumped
    assert isinstance(out, dict) and out["probes"][0]["facts"] == {"env.world_size": 8, "ok": True}


def test_empty_and_idempotent() -> None:
    assert redact_text("") == ""
    once = redact_text(f"HF_TOKEN={HF}")
    assert redact_text(once) == once


# -- the secrets corpus (tests/secrets_corpus.py): every shape hidden, every look-alike kept ----------


def test_the_corpus_is_big_enough() -> None:
    assert len(SHAPES) >= 60 and len({s.name for s in SHAPES}) == len(SHAPES)
    assert len(LOOKALIKES) >= 20


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_secret_shape_is_redacted(shape: Shape) -> None:
    out = redact_text(shape.text)
    for secret in shape.secrets:
        assert secret not in out, out
    assert REDACTED in out
    assert redact_text(out) == out  # idempotent
    if shape.variable:
        assert is_secret_name(shape.variable)
        assert redact_value(shape.variable, shape.text.split("=", 1)[1]) == REDACTED


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_survive(text: str) -> None:
    assert redact_text(text) == text


def test_the_whole_corpus_at_once() -> None:
    """Shapes next to one another and next to look-alikes, in one text (name=value runs overlap)."""
    text = "\n".join(f"{look} {shape.text}" for look, shape in zip(LOOKALIKES * 3, SHAPES, strict=False))
    out = redact_text(text)
    for shape in SHAPES:
        for secret in shape.secrets:
            assert secret not in out
    for look in LOOKALIKES:
        assert look in out


def test_evidence_is_redacted_before_it_is_cut() -> None:
    from probes.subproc import MAX_EVIDENCE_CHARS, evidence

    secret = "hf_" + "Q" * 40
    output = "x" * (MAX_EVIDENCE_CHARS - 10) + " " + secret
    shown = evidence("cmd", output).output
    assert "hf_" not in shown and "QQQQQQQQ" not in shown


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_json_stays_json_and_leaks_nothing(depth: int) -> None:
    """Every command's --json goes through redact_text as text: a document (and a document held in a
    string of it, a level or two deeper) must still parse, without a secret and with every look-alike."""
    payload = {
        "shapes": [{"text": s.text, "around": f"x {s.text} y"} for s in SHAPES],
        "looks": list(LOOKALIKES),
    }
    document = json.dumps(payload, indent=2)
    for _ in range(depth - 1):
        document = json.dumps({"nested": document})
    out = redact_text(document)
    for _ in range(depth):
        data = json.loads(out)
        out = data["nested"] if "nested" in data else json.dumps(data)
    for shape in SHAPES:
        for secret in shape.secrets:
            assert secret not in out
    assert json.loads(out)["looks"] == list(LOOKALIKES)


# -- punctuation after a hidden value stays -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token=abc123, next", f"token={REDACTED}, next"),
        ("HF_TOKEN=abc123.", f"HF_TOKEN={REDACTED}."),
        ("(token=abc123), then", f"(token={REDACTED}), then"),
        ("[password=abc123]", f"[password={REDACTED}]"),
        ("password: hunter2; retry", f"password: {REDACTED}; retry"),
        ('"key": "' + SK + '", "b": 1', f'"key": "{REDACTED}", "b": 1'),
        ("api_key: 'xyz987',", f"api_key: '{REDACTED}',"),
        ("--password X, then", f"--password {REDACTED}, then"),
        ("--api-key=abc123)", f"--api-key={REDACTED})"),
        ("curl -u a:pw123, next", f"curl -u a:{REDACTED}, next"),
        ("mysql -pabc123, x", f"mysql -p{REDACTED}, x"),
        ("see https://h/x?token=abc123, y", f"see https://h/x?token={REDACTED}, y"),
        ("(https://h/x?sig=abc123).", f"(https://h/x?sig={REDACTED})."),
        ("Bearer abcdefgh12345678.", f"Bearer {REDACTED}."),
        ("Authorization: Bearer abcdefgh12345678", f"Authorization: Bearer {REDACTED}"),
        (f"({HF}),", f"({REDACTED}),"),
        # a bracket the value opened is the value's own
        ("password=pa(ss)", f"password={REDACTED}"),
        ("password=pa(ss)),", f"password={REDACTED}),"),
        # placeholders stay, with their punctuation
        ("password=$PW.", "password=$PW."),
        ("token=),", "token=),"),
    ],
)
def test_punctuation_after_a_hidden_value_stays(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


_HEADERS = ("header", "cut pem key")  # a header's value runs to the end of its line, a cut key to the end


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_shape_keeps_the_punctuation_around_it(shape: Shape) -> None:
    wraps = ['"{}",', "[{}]", "({})", "({}), next", "{}. Next"]
    if any(kind in shape.name for kind in _HEADERS):
        wraps = wraps[:3] if "header" in shape.name else []
    for wrap in wraps:
        before, after = wrap.split("{}")
        out = redact_text(wrap.format(shape.text))
        assert not [secret for secret in shape.secrets if secret in out], out
        assert out.startswith(before) and out.endswith(after), out


def test_every_secret_name_word_holds_a_needle_of_the_name_value_passes() -> None:
    # the name=value, --flag value and ?query= passes run only when the text holds one of
    # _SECRET_WORDS: a word SECRET_NAME knows that held none would never be redacted there
    from triage.core import redact

    words = [re.sub(r"[^a-z]", "", alt.lower()) for alt in redact.SECRET_NAME().pattern.split("|")]
    assert words and all(any(needle in word for needle in redact._SECRET_WORDS) for word in words)
    assert redact.redact_text("export WANDB_API_KEY=0123456789abcdef") == "export WANDB_API_KEY=<redacted>"
    assert redact.redact_text("run --db-passwd hunter2 now") == "run --db-passwd <redacted> now"
