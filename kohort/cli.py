"""The `kohort` command: one entry point, one subcommand per component.

Each subcommand module exposes `add_arguments(parser)` and `run(args) -> int`; this file only
wires them together, so components stay importable without each other. `kohort dev` is dev
tooling (`hack/`) that only a source checkout has: an installed wheel or the image answers it
with where it runs.
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
    "dashboard": ("dashboard.main", "serve a read-only live web page of the queues and GPUs"),
    "simulate": ("controller.simulate.main", "replay a cluster trace through scheduling policies"),
    "dev": ("hack.devcli", "start and stop the local control plane (etcd, apiserver, kwok, ...)"),
}
# Subcommands whose module is not installed: they run from a source checkout of kohort.
FROM_SOURCE_CHECKOUT = frozenset({"dev"})


class FromSourceCheckout:
    """Stands in for a subcommand whose module this installation lacks: it takes any arguments
    and says where the subcommand runs."""

    def __init__(self, name: str, module: str) -> None:
        self.message = (
            f"`kohort {name}` runs from a source checkout only: its module {module} is dev"
            " tooling, which the installed package and the image leave out. In a clone of the"
            f" repository, `make demo` sets up .venv; then run `.venv/bin/kohort {name} ...` there."
        )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = self.message
        parser.add_argument("words", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        print(f"kohort: {self.message}", file=sys.stderr)
        return 1


def _load(name: str) -> Subcommand:
    module = SUBCOMMANDS[name][0]
    try:
        return cast(Subcommand, importlib.import_module(module))
    except ModuleNotFoundError as missing:
        # Only the module itself or a package above it: a module it imports must be there.
        itself_absent = f"{module}.".startswith(f"{missing.name}.")
        if name in FROM_SOURCE_CHECKOUT and missing.name and itself_absent:
            return FromSourceCheckout(name, module)
        raise


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, the arguments of that subcommand alone (the
    modules of the others are not imported: a webhook process does not carry the
    controller's libraries)."""
    parser = argparse.ArgumentParser(prog="kohort", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            _load(name).add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in words if not word.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(words)
    return _load(args.command).run(args)


if __name__ == "__main__":
    sys.exit(main())
