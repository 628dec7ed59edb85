"""``unirender spec check JOB`` (validate, print the plan) and ``unirender spec schema`` (JSON Schema)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from unirender.errors import SpecError, UnirenderError
from unirender.simulator import AI2THOR, MLAGENTS


class _DeprecatedFamilyFlag(argparse.Action):
    """``--mlagents``: the deprecated spelling of ``--family mlagents`` (same effect, and a warning)."""

    def __init__(self, option_strings, dest, family: str = MLAGENTS, **kwargs):
        self.family = family
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"unirender: {option_string} is deprecated: use --family {self.family}", file=sys.stderr)
        setattr(namespace, self.dest, self.family)


def add_family_option(parser: argparse.ArgumentParser, families: Iterable[str], *, help: str) -> None:
    """``--family {names}`` (the names of the command's family registry; AI2-THOR by default) and ``--mlagents``,
    its deprecated alias (``args.family``)."""
    parser.add_argument("--family", choices=list(families), default=AI2THOR, help=f"{help} (default: %(default)s)")
    parser.add_argument("--mlagents", action=_DeprecatedFamilyFlag, dest="family",
                        help="deprecated: --family mlagents")


def register(sub) -> None:
    p = sub.add_parser("spec", help="validate job specs and print their JSON Schema")
    spec_sub = p.add_subparsers(dest="spec_command", metavar="SUBCOMMAND", required=True)

    c = spec_sub.add_parser("check", help="validate a job spec and print the resolved plan")
    c.add_argument("spec", help="job spec file (YAML, JSON or TOML)")
    c.add_argument("--workers", type=int, default=None)
    c.add_argument("--no-resolve", action="store_true", help="skip probing the platform")
    c.set_defaults(func=cmd_check)

    s = spec_sub.add_parser("schema", help="print the JSON Schema of job specs")
    s.add_argument("--environment", action="store_true", help="the schema of an environment alone")
    from unirender.spec.families import SPEC_FAMILIES

    add_family_option(s, SPEC_FAMILIES, help="the family whose jobs' schema to print (its environment.protocol)")
    s.set_defaults(func=cmd_schema)


def cmd_check(args) -> int:
    from unirender.jobs.plan import plan_job
    from unirender.spec import check_actions, check_builtin_scenes, load_spec, spec_warnings_text

    try:
        spec = load_spec(args.spec)
        check_builtin_scenes(spec)
        warnings = check_actions(spec)
    except SpecError as exc:
        print(f"unirender: {exc}", file=sys.stderr)
        return 2
    if warnings:
        print(f"unirender: {spec_warnings_text(spec, warnings)}", file=sys.stderr)
    print(f"{args.spec}: valid")
    if _print_build(spec) != 0:
        return 1
    try:
        plan = plan_job(spec, workers=args.workers, resolve=not args.no_resolve)
    except UnirenderError as exc:
        print(f"unirender: no platform can run this job:\n{exc}", file=sys.stderr)
        return 1
    print(plan.describe(spec))
    return 0


def _print_build(spec) -> int:
    """The build the spec names: what it is and whether the declared platform can run it."""
    from unirender.builds import BuildError
    from unirender.builds.resolve import describe_named_build
    from unirender.spec.families import spec_family

    environment = spec.environment
    try:  # the platform the job resolves for (AI2-THOR's auto is WebGL for a WebGL build)
        lines, warnings = describe_named_build(environment.build_name, spec_family(spec).platform_name(spec))
    except (BuildError, OSError) as exc:
        print(f"unirender: environment: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    for warning in warnings:
        print(f"unirender: warning: environment.platform {environment.platform!r}: {warning}", file=sys.stderr)
    return 0


def cmd_schema(args) -> int:
    from unirender.spec.families import spec_family

    family = spec_family(args.family)
    model = family.environment_model if args.environment else family.job_model
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0
