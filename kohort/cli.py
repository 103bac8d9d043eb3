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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kohort", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        _load(module).add_arguments(sub_parser)
        sub_parser.set_defaults(module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _load(args.module).run(args)


if __name__ == "__main__":
    sys.exit(main())
