"""The code blocks of README.md and docs/*.md by section, for the tests that run them."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_blocks(heading: str, path: str = "README.md") -> list[str]:
    """The ```python blocks of a markdown file (relative to the repository root) under the
    heading that starts with ``heading``, in order."""
    return [code for h, _, code in python_blocks(path) if h.startswith(heading)]


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
