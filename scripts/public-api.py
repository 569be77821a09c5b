#!/usr/bin/env python3
"""The toolward crate's public surface, one line per item, from rustdoc's JSON
(`target/doc/toolward.json`, written by `scripts/public-api.sh`): each re-export of lib.rs
with its kind, and under it the public fields, variants and methods an embedder reaches.
Usage: public-api.py JSON > host/public-api.txt"""
import json, sys

doc = json.load(open(sys.argv[1]))
index = doc["index"]
paths = doc.get("paths", {})


def item(i):
    return index.get(str(i))


def kind_of(it):
    return next(iter(it["inner"]))


def signature_line(name, it):
    kind = kind_of(it)
    return f"{kind} {name}"


lines = []


def members(prefix, it):
    kind = kind_of(it)
    inner = it["inner"][kind]
    out = []
    if kind == "struct":
        fields = inner.get("kind", {})
        plain = fields.get("plain") if isinstance(fields, dict) else None
        if plain:
            for f in plain.get("fields", []):
                fi = item(f)
                if fi and fi.get("visibility") == "public":
                    out.append(f"{prefix}.{fi['name']}")
        elif isinstance(fields, dict) and "tuple" in fields:
            for n, f in enumerate(fields["tuple"]):
                fi = item(f) if f is not None else None
                if fi and fi.get("visibility") == "public":
                    out.append(f"{prefix}.{n}")
    if kind == "enum":
        for v in inner.get("variants", []):
            vi = item(v)
            if vi:
                out.append(f"{prefix}::{vi['name']}")
    if kind == "trait":
        for m in inner.get("items", []):
            mi = item(m)
            if mi:
                out.append(f"{prefix}::{mi['name']} ({kind_of(mi)})")
    for impl_id in inner.get("impls", []) if isinstance(inner, dict) else []:
        impl = item(impl_id)
        if not impl:
            continue
        body = impl["inner"]["impl"]
        if body.get("trait") is not None or body.get("is_synthetic") or body.get("blanket_impl"):
            continue
        for m in body.get("items", []):
            mi = item(m)
            if mi and mi.get("visibility") == "public" and mi.get("name"):
                out.append(f"{prefix}::{mi['name']} ({kind_of(mi)})")
    return out


root = item(doc["root"])
for i in root["inner"]["module"]["items"]:
    it = item(i)
    if it is None or it.get("visibility") != "public":
        continue
    kind = kind_of(it)
    if kind == "use":
        use = it["inner"]["use"]
        target = item(use["id"]) if use.get("id") is not None else None
        name = use["name"]
        if target is None:
            lines.append(f"use {name} (from {use['source']})")
            continue
        lines.append(signature_line(name, target))
        lines.extend("    " + m for m in members(name, target))
    else:
        lines.append(signature_line(it["name"], it))
        lines.extend("    " + m for m in members(it["name"], it))

# Sorted by top-level item, members kept under their item.
groups, current = [], None
for line in lines:
    if line.startswith("    "):
        current[1].append(line)
    else:
        current = (line, [])
        groups.append(current)
for head, body in sorted(groups, key=lambda g: g[0].split(" ", 1)[1]):
    print(head)
    for line in sorted(set(body)):
        print(line)
