"""How the webhook and the controller run: on uvloop's event loop, until SIGTERM or SIGINT."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_SERVE = textwrap.dedent(
    """
    import argparse, asyncio, os, signal
    from kohort.service import run_until_signalled

    async def serve(args, stop):
        loop = asyncio.get_running_loop()
        print(type(loop).__module__, flush=True)
        loop.call_later(0.1, os.kill, os.getpid(), getattr(signal, args.signal))
        async with asyncio.timeout(10):
            await stop.wait()
        return 3

    raise SystemExit(run_until_signalled(serve, argparse.Namespace(signal={signal!r})))
    """
)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_component_runs_on_uvloop_and_stops_cleanly_when_signalled(signal_name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE.format(signal=signal_name)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 3, done.stderr  # serve's own exit code: it returned, not killed
    assert done.stdout.strip() == "uvloop"
