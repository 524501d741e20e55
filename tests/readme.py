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


def python_blocks(path: str = "README.md") -> list[tuple[str, int, str]]:
    """Every ```python block of a markdown file (relative to the repository root), as
    ``(heading, n, code)``: the ``#`` heading above it (without the #s) and its index under it."""
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    out: list[tuple[str, int, str]] = []
    heading, n, in_fence = "", 0, False
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            if not in_fence and line.strip() == "```python":
                end = i + 1
                while not lines[end].startswith("```"):
                    end += 1
                out.append((heading, n, "".join(lines[i + 1:end])))
                n += 1
                i = end + 1
                continue
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            heading, n = line.lstrip("#").strip(), 0
        i += 1
    return out


def markdown_files() -> list[str]:
    """README.md and docs/*.md, relative to the repository root."""
    docs = os.path.join(ROOT, "docs")
    return ["README.md"] + sorted(os.path.join("docs", name) for name in os.listdir(docs)
                                  if name.endswith(".md"))
