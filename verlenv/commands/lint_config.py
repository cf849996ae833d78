"""verlenv lint-config: check a verl config (YAML and/or Hydra overrides) against verl's own schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verlenv.errors import ConfigError
from verlenv.inside.configlint.attention import not_checked
from verlenv.inside.configlint.kernels import from_option
from verlenv.inside.configlint.render import render, to_json
from verlenv.inside.configlint.rules import lint
from verlenv.inside.configlint.schema import VerlSchema, load_schema
from verlenv.inside.configlint.source import collect

NAME = "lint-config"
HELP = (
    "Lint a verl config before a job is queued: unknown keys (with 'did you mean'), '+' keys verl never reads, "
    "keys from popular tips that do not exist, wrong types, values verl rejects (rollout.name, adv_estimator, "
    "trainer.logger, attn_implementation), engines and attention kernels (flash-attn) not installed, logger "
    "prerequisites, and batch-size divisibility. Arguments: an optional YAML file, then Hydra overrides as passed "
    "to verl.trainer.main_ppo. Exit 1 on errors (and on warnings with --strict)."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="CONFIG.yaml|OVERRIDE",
        help="a YAML file and/or overrides such as trainer.total_epochs=3 or +a.b=1",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--verl-wheel", type=Path, help="lint against this verl wheel (default: the installed verl)")
    source.add_argument("--verl-version", help="lint against this verl release (wheel fetched into the cache)")
    parser.add_argument(
        "--installed-from",
        metavar="SITE|MANIFEST|LOCK|PROFILE",
        help="check the attention kernels the config needs (flash-attn for verl's default flash_attention_2) "
        "against this environment instead of the running one: a site-packages directory, an image or venv "
        "manifest (.json), a lock file or a profile name. Without it, a lint against --verl-wheel/--verl-version "
        "lists them as not checked: the machine that lints is not the one that trains",
    )
    parser.add_argument("--json", action="store_true", help="versioned JSON output")
    parser.add_argument("--strict", action="store_true", help="warnings fail too")


def schema_for(args: argparse.Namespace) -> VerlSchema:
    if args.verl_version:
        from verlenv.wheels.cache import Cache, default_root
        from verlenv.wheels.wheelhouse import fetch_wheel

        return load_schema(fetch_wheel("verl", args.verl_version, Cache(default_root())))
    return load_schema(args.verl_wheel)


def execute(args: argparse.Namespace) -> int:
    if not args.inputs:
        raise ConfigError("nothing to lint", hint="verlenv lint-config run.yaml [overrides...]")
    schema, settings = schema_for(args), collect(args.inputs)
    installed = not (args.verl_wheel or args.verl_version)
    kernels = from_option(args.installed_from) if args.installed_from else None
    findings = lint(schema, settings, installed=installed, kernels=kernels)
    # Against a wheel, this machine's site-packages says nothing about the job's: say what was left open.
    unchecked = not_checked(schema, settings) if kernels is None and not installed else []
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning"]
    code = 1 if errors or (args.strict and warnings) else 0
    if args.json:
        print(json.dumps(to_json(schema, findings, code, unchecked), indent=2))
    else:
        print(render(schema, findings, unchecked))
    return code
