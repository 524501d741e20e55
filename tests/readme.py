"""The README's code blocks by section, for the tests that run them."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README section whose ``###`` heading starts with ``heading``."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    start = text.index("\n### " + heading)
    end = text.find("\n## ", start + 1)
    nxt = text.find("\n### ", start + 1)
    end = min(e for e in (end, nxt, len(text)) if e != -1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)
