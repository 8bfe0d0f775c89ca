#!/usr/bin/env python3
"""Checks the links between the repository's Markdown files: every relative
link names a file that exists, and every #anchor a heading of that file (as
GitHub makes anchors from headings). Prints each broken link and exits 1."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(text):
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped (hyphens and underscores kept), spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|~~", "", text.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out, fenced = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def markdown_files():
    for top in ("README.md", "docs"):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            yield path
        for dirpath, _, names in os.walk(path):
            for name in sorted(names):
                if name.endswith(".md"):
                    yield os.path.join(dirpath, name)


broken = []
cache = {}
for md in markdown_files():
    fenced = False
    with open(md, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                if not os.path.exists(dest):
                    broken.append(f"{md}:{number}: {target}: no file {dest}")
                    continue
                if anchor and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        broken.append(f"{md}:{number}: {target}: no heading '#{anchor}' in {dest}")

for b in broken:
    print(b)
print(f"check_links: {len(broken)} broken link(s)" if broken else "check_links: ok")
sys.exit(1 if broken else 0)
