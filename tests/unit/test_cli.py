"""The `kohort` command wires every component's subcommand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kohort.cli import SUBCOMMANDS, build_parser, main


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_subcommand_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: kohort {command}" in capsys.readouterr().out


def test_a_missing_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([])
    assert exit_info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_the_webhook_process_does_not_load_the_controllers_libraries() -> None:
    code = (
        "import sys\n"
        "from kohort import cli\n"
        "cli.build_parser('webhook').parse_args(['webhook'])\n"
        "assert 'webhook.main' in sys.modules\n"
        "print(sorted(m for m in ('controller.main', 'kubernetes_asyncio') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
