"""One module per `verlenv` subcommand: NAME, HELP, configure_parser(parser), execute(args) -> int.

`options` is not a subcommand: it holds the options several of them share.
"""
