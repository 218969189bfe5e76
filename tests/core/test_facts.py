"""The one ProbeResult codec: what the app's probe process sends is what the parent reads."""

from __future__ import annotations

import json

from triage.core.facts import Evidence, ProbeResult


def test_a_result_survives_the_round_trip_through_json() -> None:
    result = ProbeResult(
        "net",
        "warn",
        {"net.master_port_free": False, "net.ifaces": ["eth0"]},
        (Evidence("ss -ltn", "LISTEN 0 128 *:29500"),),
        0.25,
        "port 29500 is taken",
        flagged=("net.master_port_free",),
    )
    text = json.dumps(result.to_plain())
    assert ProbeResult.from_plain(json.loads(text)) == result


def test_an_old_line_without_flagged_still_reads() -> None:
    data = {"name": "env", "status": "ok"}
    assert ProbeResult.from_plain(data) == ProbeResult("env", "ok")
