"""One module per `verlenv` subcommand: NAME, HELP, configure_parser(parser), execute(args) -> int.

The table below is all `verlenv --help` needs; a command's module is imported only when that
command runs, so one command's missing package (docker, PyYAML, pyelftools) never stops another.
`options` is not a subcommand: it holds the options several of them share.
"""

# (name, one-line summary), in the order of the pipeline, then the commands for inside containers.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("profiles", "list the profiles with their components and lock state"),
    ("lock", "resolve profiles into hashed locks, or check them offline"),
    ("verify", "metadata and ELF ABI verdicts for a profile's locked wheels"),
    ("base", "make a Debian base layer from recorded .debs and record what it provides"),
    ("build", "the bit-for-bit reproducible image build of one profile"),
    ("venv", "the same locked environment as a virtual environment, without Docker"),
    ("bundle", "a profile's wheels for another Python, as checked parts with an installer"),
    ("accept-image", "run the acceptance suite inside a profile's built image"),
    ("rootfs", "an image's root filesystem without an engine, checked file by file"),
    ("publish", "push an accepted image by digest and update the catalog"),
    ("release", "lock check -> verify -> build -> accept -> publish"),
    ("pull", "pull a published image by digest and re-check it"),
    ("services", "install and start the Docker engine, mmdebstrap and a registry"),
    ("doctor", "what is wrong with this environment, and how to fix it"),
    ("clean", "find (and delete) stale artifacts of other versions"),
    ("accept", "the PPO acceptance suite with its memory gate, run here"),
    ("lint-config", "check a verl config against verl's own schema"),
)


def module_name(command: str) -> str:
    return f"verlenv.commands.{command.replace('-', '_')}"


def before_parsing(argv: list[str]) -> None:
    """Start what a command wants running before its module is even imported: doctor's import probe,
    its slowest fact, overlaps the ~0.2 s of importing the checks and building the parser."""
    if argv[:1] == ["doctor"]:
        from verlenv.inside.doctor.probe import start_early

        start_early(argv)
