"""One module per `verlenv` subcommand: NAME, HELP, configure_parser(parser), execute(args) -> int."""
