#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fails when a header includes one from a higher layer (docs/architecture.md, "Layers"),
or when a static_assert's text is written anywhere but the catalogue.

Input: the include/ folder. Each folder of include/shardex/ is one floor; a
header may include headers of its own floor and of the floors below it, never
one above. Output: exit status 0, or 1 with every offending include named
(file, line, the two floors). A folder that is not on the list is an error
too, so a new folder has to be given its floor. Every static_assert message
is a name from core/compile_errors.hpp, so that each text is written once.
"""
import pathlib
import re
import sys

# Lowest first. The generated config.hpp sits with core.
FLOORS = ["core", "layout", "lower", "backend", "device", "tensor", "autodiff",
          "transition", "expr", "nn", "eager", "mesh", "io", "top"]
CATALOGUE = "shardex/core/compile_errors.hpp"
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](shardex[^>"]*)[>"]')


def floor_of(rel: str) -> str:
    """The floor of a path relative to include/ ("shardex/expr/sum.hpp" -> expr)."""
    parts = rel.split("/")
    if len(parts) <= 2:  # shardex.hpp, shardex/cuda.hpp, shardex/config.hpp
        return "core" if rel == "shardex/config.hpp" else "top"
    return parts[1]


def literal_asserts(text: str):
    """The line numbers of static_asserts whose arguments hold a string literal."""
    for m in re.finditer(r"\bstatic_assert\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if '"' in text[m.end():i]:
            yield text.count("\n", 0, m.start()) + 1


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "include")
    headers = sorted(root.rglob("*.hpp"))
    if not headers:
        print(f"check_layers: no headers under {root}")
        return 1
    problems = []
    for h in headers:
        rel = h.relative_to(root).as_posix()
        mine = floor_of(rel)
        if mine not in FLOORS:
            problems.append(f"{rel}: folder '{mine}' has no floor; add it to FLOORS in {__file__}")
            continue
        text = h.read_text()
        if rel != CATALOGUE:
            for n in literal_asserts(text):
                problems.append(f"{rel}:{n}: a static_assert with its text written here; name it in {CATALOGUE}")
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1).startswith("shardex/stop_here"):
                continue
            theirs = floor_of(m.group(1))
            if theirs not in FLOORS:
                problems.append(f"{rel}:{n}: includes {m.group(1)} from folder '{theirs}', which has no floor")
            elif FLOORS.index(theirs) > FLOORS.index(mine):
                problems.append(f"{rel}:{n}: {mine}/ includes {m.group(1)} from the higher floor {theirs}/")
    print(f"check_layers: {len(headers)} headers, floors " + " <- ".join(FLOORS))
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
