"""The decision core, and the simulator that runs it alone, load no API model library."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_core_and_the_simulator_loads_neither_pydantic_nor_msgspec() -> None:
    code = (
        "import sys, controller.quota, controller.simulate.main;"
        "print(sorted(m for m in ('pydantic', 'msgspec') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
