"""docs/library.md's examples run as they are written, against the loopback simulators."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "library.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)
TITLES = ["genesys attribute PATCH through a 429 storm", "cxone call through a token expiry"]


def test_the_page_has_one_example_per_platform() -> None:
    assert len(BLOCKS) == len(TITLES)
    assert "GenesysSimulator" in BLOCKS[0] and "CxoneSimulator" in BLOCKS[1]


@pytest.mark.parametrize("index", range(len(TITLES)), ids=TITLES)
def test_the_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(BLOCKS[index], f"{DOC.name}: example {index + 1}", "exec")
    exec(code, {"__name__": "__main__"})  # each block is a whole script (its asserts are the checks)
    assert capsys.readouterr().out.strip()
