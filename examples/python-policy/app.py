"""A toolward policy in Python: the decisions of `examples/custom-policy`.

- A `local-change` or `destructive` call whose path argument leaves `write_root`, after
  lexical normalisation, is denied.
- A `remote-change` call whose URL argument names a host off `allowed_hosts` is held; a URL
  that cannot be read unambiguously is denied.
- Everything else is decided by the decision table in `rules` (the rules file's shape:
  `decisions`, `servers.<name>.decisions`, `servers.<name>.tools.<tool>.decision`, and
  `limits` against the call's facts), as the default component decides.

The checks only tighten the table: the answer is the stricter of the two (deny over hold
over allow). Built with componentize-py against world `policy-component` of
`toolward:policy@0.1.0`; it runs under a WASI that grants nothing (no files, network,
environment; the clock is the call's time; random is seeded by the arguments hash).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import types

EFFECTS = {
    types.Effect.READ_ONLY: ("read-only", 0),
    types.Effect.LOCAL_CHANGE: ("local-change", 1),
    types.Effect.REMOTE_CHANGE: ("remote-change", 2),
    types.Effect.DESTRUCTIVE: ("destructive", 3),
}
DEFAULT_TABLE = ["allow", "hold", "hold", "deny"]
LIMIT_KEYS = [
    ("forwarded_per_minute", "forwarded", "minute"),
    ("forwarded_per_hour", "forwarded", "hour"),
    ("held_per_minute", "held", "minute"),
    ("held_per_hour", "held", "hour"),
]

# Set by `configure`; the host snapshots the configured instance, so every decision starts
# with them parsed.
SETTINGS = None


class Refused(Exception):
    """Settings the policy cannot use."""


def names(settings, key, default):
    value = settings.get(key, default)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise Refused(f"`{key}` must be an array of non-empty strings")
    return value


def table(value):
    out = [None, None, None, None]
    for effect, verdict in (value or {}).items():
        index = {"read-only": 0, "local-change": 1, "remote-change": 2, "destructive": 3}.get(effect)
        if index is None or verdict not in ("allow", "deny", "hold"):
            raise Refused(f"decisions: `{effect}`: `{verdict}` is not allow, deny or hold")
        out[index] = verdict
    return out


def parse(text):
    settings = json.loads(text)
    if not isinstance(settings, dict):
        raise Refused("the settings must be a JSON object")
    rules = settings.get("rules", {})
    root = settings.get("write_root", "/")
    if not isinstance(root, str) or not root.startswith("/"):
        raise Refused("`write_root` must be an absolute path")
    root = normalise("/", root)
    servers = {}
    for name, server in rules.get("servers", {}).items():
        servers[name] = {
            "decisions": table(server.get("decisions")),
            "limits": server.get("limits", {}),
            "tools": {
                tool: {"decision": rule.get("decision"), "limits": rule.get("limits", {})}
                for tool, rule in server.get("tools", {}).items()
            },
        }
    return {
        "decisions": table(rules.get("decisions")),
        "servers": servers,
        "write_root": root,
        "path_arguments": names(settings, "path_arguments", ["path"]),
        "url_arguments": names(settings, "url_arguments", ["url"]),
        "allowed_hosts": [h.lower() for h in names(settings, "allowed_hosts", [])],
    }


def verdict(s, server, tool, effect):
    name, index = EFFECTS[effect]
    rules = s["servers"].get(server)
    rule = rules and rules["tools"].get(tool)
    if rule and rule["decision"]:
        return rule["decision"], f"the rule for tool `{tool}` of server `{server}`"
    if rules and rules["decisions"][index]:
        return rules["decisions"][index], f"the decision table of server `{server}`"
    if s["decisions"][index]:
        return s["decisions"][index], "the rules file's decision table"
    return DEFAULT_TABLE[index], "the default decision table"


def count(text):
    if text.isdigit() and text.isascii() and (len(text) == 1 or text[0] != "0"):
        return int(text)
    return None


def decide_table(s, call):
    effect, _ = EFFECTS[call.effect]
    answer, source = verdict(s, call.server, call.tool, call.effect)
    if answer == "deny":
        return ("deny", f"effect `{effect}` is denied by {source}")
    facts = {fact.name: fact.value for fact in call.facts}
    rules = s["servers"].get(call.server)
    scopes = []
    if rules and call.tool in rules["tools"]:
        scopes.append((rules["tools"][call.tool]["limits"], "tool", f"tool `{call.tool}` of server `{call.server}`"))
    if rules:
        scopes.append((rules["limits"], "server", f"server `{call.server}`"))
    for limits, scope, what in scopes:
        for key, counted, per in LIMIT_KEYS:
            if key not in limits or (counted == "held" and answer != "hold"):
                continue
            most = limits[key]
            limit = f"{most} {counted} {'call' if most == 1 else 'calls'} per {per}"
            name = f"{scope}.{counted}.{per}"
            if name not in facts:
                return ("deny", f"limit `{limit}` on {what} cannot be checked: the host gave no fact `{name}`")
            seen = count(facts[name])
            if seen is None:
                return ("deny", f"limit `{limit}` on {what} cannot be checked: fact `{name}` is not a non-negative integer")
            if seen >= most:
                return ("deny", f"limit `{limit}` on {what} reached: {seen} in the last {per}")
    if answer == "hold":
        return ("hold", f"effect `{effect}` needs approval by {source}")
    return ("allow", None)


def normalise(base, path):
    parts = []
    for part in ([] if path.startswith("/") else base.split("/")) + path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


def check_path(root, path):
    if not path:
        return "the path is empty"
    if "\\" in path or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in path):
        return f"path `{path}` holds a backslash or a control character, which servers read differently"
    if path.startswith("~"):
        return f"path `{path}` starts with `~`, which servers expand to a home directory"
    if path[:5].lower() == "file:":
        return f"path `{path}` is a `file:` URL, not a path"
    resolved = normalise(root, path)
    if root == "/" or resolved == root or resolved.startswith(root + "/"):
        return None
    return f"path `{path}` resolves to `{resolved}`, which leaves the write root `{root}`"


def url_host(url):
    """The URL's host, or raises ValueError with what is wrong."""
    if any(c in "\\ " or ord(c) < 32 or 127 <= ord(c) < 160 for c in url):
        raise ValueError("holds a backslash, a space or a control character")
    if ":" not in url:
        raise ValueError("has no scheme")
    scheme, rest = url.split(":", 1)
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"has scheme `{scheme}`; only `http` and `https` are read")
    if not rest.startswith("//"):
        raise ValueError("has no `//` before its host")
    rest = rest[2:]
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    authority = rest[: min(ends)] if ends else rest
    if "@" in authority:
        raise ValueError("carries userinfo (an `@` before the host), which can disguise the host")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError("has an IPv6 host without its closing `]`")
        host, after = authority[: end + 1], authority[end + 1 :]
        inner = host[1:-1]
        if not inner or not all(c in "0123456789abcdefABCDEF:." for c in inner):
            raise ValueError(f"has an unreadable IPv6 host `{host}`")
        if after and not after.startswith(":"):
            raise ValueError(f"has `{after}` after its IPv6 host")
        port = after[1:] if after else None
    else:
        host, _, port = authority.partition(":")
        port = port if ":" in authority else None
    if port is not None and not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        raise ValueError(f"has port `{port}`, which is not a number up to 65535")
    if host.startswith("["):
        return host
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise ValueError("has no host")
    readable = all(c.isascii() and (c.isalnum() or c in "-._") for c in host)
    if not readable or host.startswith(".") or ".." in host:
        raise ValueError(f"has host `{host}`, which is not a plain DNS name (use the `xn--` form for an international name)")
    return host


def kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    return "an object"


def check_arguments(s, call):
    """The argument check's answer, or None when it has nothing to say."""
    if call.effect == types.Effect.READ_ONLY:
        return None
    try:
        arguments = json.loads(call.arguments)
        if not isinstance(arguments, dict):
            raise ValueError("not an object")
    except ValueError as e:
        return ("deny", f"the arguments of tool `{call.tool}` of server `{call.server}` are not a JSON object: {e}")
    here = lambda name: f"argument `{name}` of tool `{call.tool}` of server `{call.server}`"
    if call.effect in (types.Effect.LOCAL_CHANGE, types.Effect.DESTRUCTIVE):
        for name in s["path_arguments"]:
            if name not in arguments:
                continue
            value = arguments[name]
            if not isinstance(value, str):
                return ("deny", f"{here(name)} is {kind(value)}, not a path")
            fault = check_path(s["write_root"], value)
            if fault:
                return ("deny", f"{here(name)}: {fault}")
        return None
    hold = None
    for name in s["url_arguments"]:
        if name not in arguments:
            continue
        value = arguments[name]
        if not isinstance(value, str):
            return ("deny", f"{here(name)} is {kind(value)}, not a URL")
        try:
            host = url_host(value)
        except ValueError as fault:
            return ("deny", f"{here(name)}: URL `{value}` {fault}")
        if host.lower() not in s["allowed_hosts"] and hold is None:
            hold = ("hold", f"{here(name)} names host `{host.lower()}`, which is not on the allowlist")
    return hold


RANK = {"allow": 0, "hold": 1, "deny": 2}


class Policy(exports.Policy):
    def configure(self, settings: str) -> None:
        global SETTINGS
        try:
            SETTINGS = parse(settings)
        except (ValueError, AttributeError, Refused) as e:
            # componentize-py turns `Err` into `configure`'s `err` result.
            raise Err(f"the settings are not usable: {e}")

    def decide(self, call: types.Call) -> types.Decision:
        if SETTINGS is None:
            return types.Decision_Deny("the policy was not configured")
        answer = decide_table(SETTINGS, call)
        own = check_arguments(SETTINGS, call)
        if own is not None and RANK[own[0]] >= RANK[answer[0]]:
            answer = own
        verdict, reason = answer
        if verdict == "allow":
            return types.Decision_Allow()
        if verdict == "hold":
            return types.Decision_Hold(reason)
        return types.Decision_Deny(reason)
