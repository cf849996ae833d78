"""verlenv doctor: check this environment (inside an image, or any venv) and say how to fix it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verlenv.errors import ConfigError
from verlenv.inside.doctor import render
from verlenv.inside.doctor.model import Facts, Status
from verlenv.inside.doctor.registry import CHECKS
from verlenv.inside.doctor.runner import run_checks
from verlenv.output import did_you_mean

NAME = "doctor"
HELP = (
    "Check this environment: drift from the image manifest, requirements, vLLM/verl/torch pins, the "
    "ELF ABI of compiled extensions, import probes (in a subprocess, with a timeout), stale artifacts, "
    "driver/GPU/NCCL, /dev/shm, environment traps and visible secrets. Exit 0: no check failed; 1: a "
    "check failed or crashed (or warned, with --strict); 2: usage error; 3: doctor itself crashed."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--static", action="store_true", help="only checks that need no GPU or runtime mounts (build time)"
    )
    parser.add_argument(
        "--json", action="store_true", help="versioned JSON (schema: verlenv/schemas/doctor-1.schema.json)"
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail too")
    parser.add_argument("--skip", action="append", default=[], metavar="ID", help="skip a check by id (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--site", type=Path, help="site-packages to inspect (default: this interpreter's)")
    parser.add_argument(
        "--manifest", type=Path, help="image manifest (default: $VERLENV_MANIFEST or /opt/verlenv/manifest.json)"
    )
    parser.add_argument(
        "--config",
        nargs="+",
        metavar="CONFIG.yaml|OVERRIDE",
        help="also lint this verl config (YAML and/or overrides) against the installed verl",
    )
    parser.add_argument(
        "--write-elf-cache",
        action="store_true",
        help="record the ELF facts and verdicts of every shared object beside the manifest, so later runs re-read "
        "only files whose size or mtime changed (the image build and `verlenv venv` do this)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds for the import probe (default 60); with --cluster, for every node's answer (default 120)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="all details and per-check timings")
    cluster = parser.add_argument_group(
        "clusters", "run the checks on every node of a running Ray cluster and compare the nodes (needs ray)"
    )
    cluster.add_argument(
        "--cluster",
        action="store_true",
        help="attach to the Ray cluster, run doctor on every alive node and compare: image and versions, the "
        "addresses Ray/NCCL/Gloo pick, RDMA readiness, /dev/shm, the libnccl loaded",
    )
    cluster.add_argument("--address", default="auto", help="the Ray cluster to attach to (default: auto)")
    cluster.add_argument(
        "--collective",
        action="store_true",
        help="also all-reduce across the nodes through Ray (NCCL, one rank per GPU; gloo without GPUs): checks "
        "the sum, prints bandwidth, latency and NCCL's transport; it takes every GPU, so run it on an idle cluster",
    )
    cluster.add_argument(
        "--collective-mib", type=float, default=8.0, metavar="MIB", help="tensor size for the bandwidth (default 8)"
    )
    parser.add_argument("--node-facts", action="store_true", help=argparse.SUPPRESS)  # what --cluster asks each node


def execute(args: argparse.Namespace) -> int:
    if args.cluster:
        return _cluster(args)
    if args.list:
        for check in CHECKS:
            print(f"{check.id:<16} {'static ' if check.static else 'runtime'}  {check.title}")
        return 0
    _checked_skips(args.skip)
    selected = [c for c in CHECKS if c.id not in args.skip and (c.static or not args.static)]
    facts = Facts(
        site=args.site,
        manifest_file=args.manifest,
        probe_timeout=args.timeout or 60.0,
        config=args.config,
        start_probe=any(c.uses_probe for c in selected),
        write_elf_cache=args.write_elf_cache,
    )
    outcomes = run_checks(selected, facts)
    failing = {Status.FAIL, Status.CRASHED} | ({Status.WARN} if args.strict else set())
    code = 1 if any(o.result.status in failing for o in outcomes) else 0
    if args.json:
        payload = render.to_json(outcomes, "static" if args.static else "full", code)
        if args.node_facts:
            from verlenv.inside.cluster import nodefacts

            payload["node"] = nodefacts.collect(facts).to_json()
        print(json.dumps(payload, indent=2))
    else:
        print(render.to_table(outcomes, args.verbose))
    return code


def _checked_skips(skips: list[str]) -> None:
    ids = {c.id for c in CHECKS}
    for skip in skips:
        if skip not in ids:
            raise ConfigError(
                f"--skip {skip}: no such check", hint=did_you_mean(skip, ids) or "see `verlenv doctor --list`"
            )


def _cluster(args: argparse.Namespace) -> int:
    from verlenv.inside.cluster import render as cluster_render
    from verlenv.inside.cluster.session import ClusterOptions, run

    _checked_skips(args.skip)
    if args.timeout is not None and args.timeout <= 0:
        raise ConfigError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    options = ClusterOptions(
        address=args.address,
        timeout=args.timeout or 120.0,
        collective=args.collective,
        collective_mib=args.collective_mib,
        skip=tuple(args.skip),
        strict=args.strict,
    )
    report = run(options)
    code = report.exit_code(args.strict)
    if args.json:
        print(json.dumps(cluster_render.to_json(report, code), indent=2))
    else:
        print(cluster_render.to_table(report))
    return code
