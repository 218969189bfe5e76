"""The options every command that runs probes accepts (`triage probe`, `triage walk`, `triage tui`),
declared once, and read back as the ProbeOptions the probes take."""

from __future__ import annotations

import argparse

from probes.configs import check_option
from probes.lint import script_path
from triage.core.errors import UserError
from triage.core.facts import MAX_TIMEOUT_S, ProbeOptions, check_timeout


def add_probe_arguments(
    parser: argparse.ArgumentParser,
    *,
    timeout_flag: str = "--probe-timeout",
    default_timeout: float = 30.0,
    can_switch_off: bool = True,
) -> None:
    """Declare the probe options on a command's parser."""
    if can_switch_off:
        parser.add_argument("--no-probes", action="store_true", help="never probe this machine; ask instead")
    parser.add_argument(
        timeout_flag,
        dest="probe_timeout",
        type=float,
        default=default_timeout,
        metavar="SECONDS",
        help=f"seconds each probe may take (default {default_timeout:g}, at most {MAX_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--accelerate-config",
        metavar="PATH",
        help="the Accelerate config to inspect (default: accelerate's own)",
    )
    parser.add_argument("--deepspeed-config", metavar="PATH", help="the DeepSpeed JSON to check against it")
    parser.add_argument(
        "--peer-host", metavar="HOST", help="a host the net probe may contact (route and master-port check)"
    )
    parser.add_argument(
        "--script",
        metavar="PATH",
        help="your training script: the lint probe reads it (triage lint) and its findings branch the walk",
    )
    parser.set_defaults(probe_timeout_flag=timeout_flag)


def probe_options(args: argparse.Namespace) -> ProbeOptions:
    """The options as given, checked: a bounded timeout and config files that are real, small,
    regular files (UserError, exit 2: never a FIFO, /dev/zero or a YAML alias bomb)."""
    flag = getattr(args, "probe_timeout_flag", "--probe-timeout")
    timeout = check_timeout(flag, args.probe_timeout)
    check_option("--accelerate-config", args.accelerate_config, "Accelerate")
    check_option("--deepspeed-config", args.deepspeed_config, "DeepSpeed")
    _check_dist_fault()
    return ProbeOptions(
        timeout_s=timeout,
        accelerate_config=args.accelerate_config,
        deepspeed_config=args.deepspeed_config,
        peer_host=args.peer_host,
        script=script_path(args.script) if getattr(args, "script", None) else None,
    )


def _check_dist_fault() -> None:
    """$TRIAGE_DIST_FAULT, read by the mini-test's ranks: a value they cannot parse is a one-line
    error now, not a failed rank later."""
    import os

    from probes.dist.protocol import FAULT_ENV, parse_faults

    try:
        parse_faults(os.environ.get(FAULT_ENV, ""))
    except ValueError as exc:
        raise UserError(str(exc)) from None
