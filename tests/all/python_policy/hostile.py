"""A hostile Python policy for tests/all/python_policy.rs: the call's tool name says which
access it tries. What it saw goes into its deny reason, so the test asserts what WASI gave
it; the failures it cannot catch (fuel, memory, a clock wait) are the host's denies."""

import os
import sys
import socket
import time

from wit_world import exports
from wit_world.imports import types


def seen(what, act):
    try:
        return types.Decision_Deny(f"{what}: got {act()!r}")
    except BaseException as e:  # noqa: BLE001 - the reason reports whatever failed
        return types.Decision_Deny(f"{what}: failed with {type(e).__name__}: {e}")


# Written by the `remember` decision: a fresh instance per decision starts without them.
REMEMBERED = []
# 4 MiB written at `remember`, past what a pooled slot resets in place, so the pages
# returned to the kernel are checked as well as those reset in place.
WRITTEN = bytearray(4 << 20)


class Policy(exports.Policy):
    def configure(self, settings: str) -> None:
        if settings == "print in configure":
            print("configuring")

    def decide(self, call: types.Call) -> types.Decision:
        tool = call.tool
        if tool == "socket":
            return seen("socket", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
        if tool == "lookup":
            return seen("lookup", lambda: socket.getaddrinfo("example.com", 443))
        if tool == "file":
            return seen("file", lambda: open("/etc/passwd").read(100))
        if tool == "listdir":
            return seen("listdir", lambda: os.listdir("/"))
        if tool == "env":
            return seen("env", lambda: dict(os.environ))
        if tool == "loop":
            while True:
                pass
        if tool == "allocate":
            # Chunks of 256 MiB: the first already passes the memory limit, where
            # small chunks spend the fuel zeroing them before the limit is reached.
            hoard = []
            while True:
                hoard.append(bytearray(256 << 20))
        if tool == "sleep":
            time.sleep(1)
            return types.Decision_Allow()
        if tool == "print":
            # One write of 10,000 lines: a loop of `print` runs out of fuel first.
            sys.stdout.write(("x" * 99 + "\n") * 10_000)
            sys.stdout.flush()
            return types.Decision_Allow()
        if tool == "remember":
            if REMEMBERED or any(WRITTEN[::4096]):
                return types.Decision_Deny(f"an earlier decision left {REMEMBERED!r}")
            REMEMBERED.append(call.id)
            for page in range(0, len(WRITTEN), 4096):
                WRITTEN[page] = 1
            return types.Decision_Allow()
        if tool == "clock":
            return types.Decision_Deny(
                f"wall={time.time_ns()} monotonic={time.monotonic_ns()} random={os.urandom(8).hex()}"
            )
        return types.Decision_Allow()
