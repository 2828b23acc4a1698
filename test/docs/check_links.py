#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every relative link of README.md, CHANGELOG.md and docs/ leads somewhere, and every page of
docs/ is reachable from README.md.

usage: check_links.py SRC_ROOT

A link to a file must name one that exists; a link with #anchor must name a heading of that
page (GitHub's anchors: lower case, punctuation dropped, spaces as '-').
"""
import os, re, sys

root = sys.argv[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_text(path):
    """GitHub's anchors of the page's headings (a code span's text is kept)."""
    found = set()
    fence = False
    for l in open(path, encoding="utf-8").read().split("\n"):
        if re.match(r"^\s*```", l):
            fence = not fence
        elif not fence:
            m = re.match(r"^#+\s+(.*)$", l)
            if m:
                found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


pages = ["README.md", "CHANGELOG.md"] + [os.path.relpath(os.path.join(d, f), root)
                                        for d, _, fs in os.walk(os.path.join(root, "docs")) for f in fs
                                        if f.endswith(".md")]
problems, graph = [], {}
for page in pages:
    graph[page] = set()
    lines = open(os.path.join(root, page), encoding="utf-8").read().split("\n")
    fence = False
    for n, l in enumerate(lines, 1):
        if re.match(r"^\s*```", l):
            fence = not fence
            continue
        if fence:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", l)):
            if re.match(r"^[a-z]+:", target) or target.startswith("<"):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(os.path.join(root, dest)):
                problems.append(f"{page}:{n}: {target}: no such file {dest}")
                continue
            if dest.endswith(".md"):
                graph[page].add(dest)
                if anchor and anchor not in heading_text(os.path.join(root, dest)):
                    problems.append(f"{page}:{n}: {target}: {dest} has no heading #{anchor}")
# The pages reachable from README.md: a walk of the link graph.
seen, frontier = {"README.md"}, ["README.md"]
while frontier:
    for d in graph.get(frontier.pop(), ()):
        if d not in seen:
            seen.add(d)
            frontier.append(d)
for page in pages:
    if page.startswith("docs/") and page not in seen:
        problems.append(f"{page}: not reachable from README.md")
for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"links: {len(pages)} pages, every relative link resolves, every page of docs/ reachable from README.md")
