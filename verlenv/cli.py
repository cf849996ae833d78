"""`verlenv` command line: one module per subcommand under verlenv.commands.

Each subcommand module defines ``NAME``, ``HELP``, ``configure_parser(parser)`` and
``execute(args) -> int``; only the module of the command being run is imported. Errors that
verlenv expected are VerlenvError subclasses and map to the documented exit codes; an import of a
known optional package that fails is a usage error with the install line; anything else is an
internal error (exit 3) with its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import traceback
from collections.abc import Sequence

from verlenv import __version__
from verlenv.commands import COMMANDS, before_parsing, module_name
from verlenv.errors import ConfigError, InternalError, VerlenvError, as_missing_dependency, exit_code_table


def _epilog() -> str:
    rows = "\n".join(f"  {code}  {meaning}" for code, meaning in exit_code_table())
    return f"exit codes:\n{rows}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: the first argument that is one (top-level options come first)."""
    names = {name for name, _ in COMMANDS}
    for arg in argv:
        if arg in names:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the command named in ``argv`` gets its module imported and its options added."""
    parser = _Parser(
        prog="verlenv",
        description="Reproducible, ABI-verified, acceptance-gated images for RL training with verl.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"verlenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    chosen = chosen_command(argv)
    for name, summary in COMMANDS:
        if name != chosen:
            sub.add_parser(name, help=summary)
            continue
        module = importlib.import_module(module_name(name))
        child = sub.add_parser(
            name,
            help=summary,
            description=module.HELP,
            epilog=_epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.configure_parser(child)
        child.set_defaults(_execute=module.execute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the command itself, not a caller in-process
        _stop_on_sigterm()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        before_parsing(argv)
        args = _parse(argv)
        if not getattr(args, "_execute", None):
            build_parser().print_help(sys.stderr)
            return ConfigError.exit_code
        return int(args._execute(args))
    except VerlenvError as exc:
        return _report(exc)
    except ModuleNotFoundError as exc:
        missing = as_missing_dependency(exc)
        if missing is None:
            return _internal()
        return _report(missing)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `verlenv ... | head`: the reader left, which is not our failure
        sys.stderr.close()
        return 0
    except Exception:  # noqa: BLE001 - the last line of defence: report, never hide
        return _internal()


def _stop_on_sigterm() -> None:
    """SIGTERM (a CI job's timeout, `kill`) unwinds like Ctrl-C: a build killed mid-compile removes its
    container and keeps its objects instead of leaving the compilers running."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _parse(argv: list[str]):  # type: ignore[no-untyped-def]
    """Parse ``argv``; a command that runs another command (``_passthrough``) gets all after the
    first ``--`` verbatim, wherever its positionals stand (argparse's REMAINDER swallows the options
    that follow a positional)."""
    if "--" in argv:
        split = argv.index("--")
        args = build_parser(argv).parse_args(argv[:split])
        name = getattr(args, "_passthrough", "")
        if name:
            setattr(args, name, argv[split + 1 :])
            return args
    return build_parser(argv).parse_args(argv)


def _report(exc: VerlenvError) -> int:
    if isinstance(exc, InternalError):
        traceback.print_exc()
    print(exc.render(), file=sys.stderr)
    return exc.exit_code


def _internal() -> int:
    traceback.print_exc()
    print(f"error: {InternalError.label}", file=sys.stderr)
    return InternalError.exit_code


if __name__ == "__main__":
    sys.exit(main())
