"""verlenv services: install and start what the build host and the integration tests need."""

from __future__ import annotations

import argparse
import contextlib
import os

from verlenv.errors import CheckFailed
from verlenv.image import services
from verlenv.output import print_json, table

NAME = "services"
HELP = (
    "Install (apt) and start the host services: Docker engine (dockerd --bridge=none "
    "--iptables=false), mmdebstrap, bubblewrap, and with --registry a Distribution registry on "
    "127.0.0.1:PORT. Idempotent; needs root on a fresh machine. `status` only reports."
)
REGISTRY_PID = services.STATE_DIR / "registry.pid"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("up", "status", "down"),
        help="up: install+start; status: report; down: stop the registry started by `up`",
    )
    parser.add_argument("--registry", action="store_true", help="with up: also run a registry on 127.0.0.1")
    parser.add_argument("--registry-port", type=int, default=5000, help="registry port (default 5000)")
    parser.add_argument("--json", action="store_true", help="machine-readable status")


def execute(args: argparse.Namespace) -> int:
    if args.action == "up":
        services.ensure_programs()
        services.ensure_engine()
        if args.registry:
            _registry_up(args.registry_port)
    elif args.action == "down":
        _registry_down()
    return _report(args)


def _registry_up(port: int) -> None:
    host = f"127.0.0.1:{port}"
    if services.registry_answers(host):
        return
    registry = services.start_registry(services.STATE_DIR / "registry", port)
    REGISTRY_PID.write_text(str(registry.pid))


def _registry_down() -> None:
    if REGISTRY_PID.exists():
        pid = int(REGISTRY_PID.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)
        REGISTRY_PID.unlink()


def _report(args: argparse.Namespace) -> int:
    host = f"127.0.0.1:{args.registry_port}"
    rows = {
        "programs": "all installed"
        if not services.missing_programs()
        else "missing: " + ", ".join(services.missing_programs()),
        "docker-engine": "up" if services.engine_answers() else "down",
        "registry": f"up at {host}" if services.registry_answers(host) else f"not running at {host}",
    }
    if args.json:
        print_json({"services": rows})
    else:
        print(table(["service", "state"], list(rows.items())))
    if args.action == "up" and rows["docker-engine"] != "up":
        raise CheckFailed("the Docker engine is not answering")
    return 0
