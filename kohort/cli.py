"""The `kohort` command: one entry point, one subcommand per component.

Each subcommand module exposes `add_arguments(parser)` and `run(args) -> int`; this file only
wires them together, so components stay importable without each other.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast


class Subcommand(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("webhook.main", "serve the mutating and validating admission webhook"),
    "controller": ("controller.main", "run the quota controller"),
    "certs": ("certs.main", "generate certificates for the webhook"),
    "simulate": ("controller.simulate.main", "replay a cluster trace through scheduling policies"),
    "dev": ("hack.devcli", "start and stop the local control plane (etcd, apiserver, kwok, ...)"),
}


def _load(module: str) -> Subcommand:
    return cast(Subcommand, importlib.import_module(module))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, the arguments of that subcommand alone (the
    modules of the others are not imported: a webhook process does not carry the
    controller's libraries)."""
    parser = argparse.ArgumentParser(prog="kohort", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            _load(module).add_arguments(sub_parser)
        sub_parser.set_defaults(module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in words if not word.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(words)
    return _load(args.module).run(args)


if __name__ == "__main__":
    sys.exit(main())
