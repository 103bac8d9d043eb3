"""The `kohort` command wires every component's subcommand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kohort.cli import SUBCOMMANDS, build_parser, main


def in_a_fresh_interpreter(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a Python process of its own, which has imported nothing yet."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


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
    done = in_a_fresh_interpreter(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.fixture
def without_dev_tooling(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hack` unimportable, as in an installed wheel or the image."""
    monkeypatch.setitem(sys.modules, "hack", None)
    monkeypatch.setitem(sys.modules, "hack.devcli", None)


@pytest.mark.usefixtures("without_dev_tooling")
def test_kohort_dev_without_its_tooling_says_it_runs_from_a_source_checkout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["dev", "up", "--pool", "gpu:4:gpus=8"]) == 1
    err = capsys.readouterr().err
    assert "`kohort dev` runs from a source checkout only" in err
    assert "hack.devcli" in err


@pytest.mark.usefixtures("without_dev_tooling")
def test_the_whole_command_line_builds_without_the_dev_tooling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    listed = capsys.readouterr().out
    assert all(command in listed for command in SUBCOMMANDS)


def test_a_missing_product_module_is_an_error_not_a_source_checkout_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "controller.simulate.main", None)
    with pytest.raises(ModuleNotFoundError):
        main(["simulate", "--help"])


def test_a_module_the_dev_tooling_imports_is_not_taken_for_the_tooling_itself() -> None:
    """In a process of its own: a failed import of hack.devcli would leave this one's modules
    half imported."""
    code = (
        "import sys\n"
        "sys.modules['hack.rest'] = None\n"
        "from kohort.cli import main\n"
        "main(['dev', '--help'])\n"
    )
    done = in_a_fresh_interpreter(code)
    assert done.returncode == 1
    assert "ModuleNotFoundError: import of hack.rest halted" in done.stderr
