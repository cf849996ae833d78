"""`verlenv` command line: one module per subcommand under verlenv.commands.

Each subcommand module defines ``NAME``, ``HELP``, ``configure_parser(parser)`` and
``execute(args) -> int``.  Errors that verlenv expected are VerlenvError subclasses and map to
the documented exit codes; anything else is an internal error (exit 3) with its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from verlenv import __version__
from verlenv.errors import ConfigError, InternalError, VerlenvError, exit_code_table

COMMANDS = (
    "profiles",
    "lock",
    "verify",
    "base",
    "build",
    "doctor",
    "clean",
    "accept",
    "accept-image",
    "lint-config",
    "publish",
    "pull",
    "release",
    "services",
)


def _epilog() -> str:
    rows = "\n".join(f"  {code}  {meaning}" for code, meaning in exit_code_table())
    return f"exit codes:\n{rows}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="verlenv",
        description="Reproducible, ABI-verified, acceptance-gated images for RL training with verl.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"verlenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"verlenv.commands.{name.replace('-', '_')}")
        child = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            epilog=_epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.configure_parser(child)
        child.set_defaults(_execute=module.execute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "_execute", None):
            build_parser().print_help(sys.stderr)
            return ConfigError.exit_code
        return int(args._execute(args))
    except VerlenvError as exc:
        if isinstance(exc, InternalError):
            traceback.print_exc()
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `verlenv ... | head`: the reader left, which is not our failure
        sys.stderr.close()
        return 0
    except Exception:  # noqa: BLE001 - the last line of defence: report, never hide
        traceback.print_exc()
        print(f"error: {InternalError.label}", file=sys.stderr)
        return InternalError.exit_code


if __name__ == "__main__":
    sys.exit(main())
