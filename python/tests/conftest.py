"""Fixtures of the Python package's tests: the real filesystem server (installed by
tests/real-servers/install.sh under TOOLWARD_REAL_SERVERS), a workspace folder it may touch,
and the values toolward is started from, pinned once per test."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import toolward

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = Path(os.environ.get("TOOLWARD_REAL_SERVERS", ROOT / "tests" / "real-servers" / ".installed"))
FILESYSTEM = INSTALLED / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
HELLO = "hello from a Python runtime\n"

# What the operator classified: a read the policy allows, a write it holds for approval.
RULES = {
    "servers": {
        "fs": {
            "tools": {
                "read_text_file": {"effect": "read-only"},
                "write_file": {"effect": "local-change", "allow_hint_mismatch": True},
            }
        }
    }
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The folder the filesystem server may touch, with `hello.txt` in it."""
    if not FILESYSTEM.is_file():
        message = f"the real filesystem server is not installed at {FILESYSTEM}: run tests/real-servers/install.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path / "workspace"
    folder.mkdir()
    (folder / "hello.txt").write_text(HELLO)
    return folder


@pytest.fixture
def options(workspace: Path) -> dict:
    """The values `toolward.pin` and `toolward.start` take: the server, the rules, the base
    folder. No state folder: toolward writes no file."""
    return {
        "servers": {"fs": {"command": "node", "args": [str(FILESYSTEM), "."]}},
        "rules": RULES,
        "base_dir": workspace,
    }


@pytest.fixture
def manifest(options: dict) -> str:
    """The manifest `toolward.pin` returns for `options` (the review is the test's)."""
    return asyncio.run(toolward.pin(**options))
