"""The ``adaserve`` command line. Sub-commands are registered by the components that own them."""

from __future__ import annotations

import argparse
import sys

from adaserve import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adaserve", description=__doc__)
    parser.add_argument("--version", action="version", version=f"adaserve {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    policies = sub.add_parser("policies", help="list the scheduling policies")
    policies.set_defaults(func=_list_policies)
    return parser


def _list_policies(_: argparse.Namespace) -> int:
    from adaserve.scheduler import POLICIES

    for name, cls in POLICIES.items():
        print(f"{name:15s} {cls.summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
