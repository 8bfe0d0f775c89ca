#!/usr/bin/env python3
"""Every guide (docs/guides/*.md) is runnable and cannot drift from the code
it shows: it links at least one example file (../../examples/...), names
the ctest cases that run them ("ctest `NAME`"), each of which must exist
in a CMakeLists.txt, and every C++ or Python block it shows is code of its
examples, line for line (indentation aside; a line that is only "..." or a
"// ..." or "# ..." comment marks a cut). docs/guides/README.md, the index,
lists every guide. Usage: check_guides.py REPO_ROOT. Prints
"check_guides: ok" or what is wrong."""

import re
import sys
import textwrap

import doc_check

CUT = re.compile(r"^\s*(\.\.\.|// \.\.\.|# \.\.\.)\s*$")


def code_blocks(text):
    return [m.group(1) for m in re.finditer(r"^```(?:cpp|python)\n(.*?)^```$", text, re.M | re.S)]


def segments(block):
    """The block's runs of lines between cuts, each dedented."""
    part, out = [], []
    for line in block.splitlines() + ["..."]:
        if CUT.match(line):
            if any(l.strip() for l in part):
                out.append(textwrap.dedent("\n".join(part)).strip("\n").splitlines())
            part = []
        else:
            part.append(line.rstrip())
    return out


def dedented_lines(path):
    return [l.strip() for l in path.read_text(encoding="utf-8").splitlines()]


def ctest_names(root):
    names = set()
    for cmake in root.rglob("CMakeLists.txt"):
        if "build" in cmake.relative_to(root).parts[:1]:
            continue
        names.update(re.findall(r"add_test\(NAME ([\w.${}-]+)", cmake.read_text(encoding="utf-8")))
    return names


def named(test, names):
    """Whether a ctest name exists (a name built in a foreach, such as
    multiprocess.ranks_exchange.${strategy}, matches by its fixed part)."""
    for n in names:
        pattern = r"[\w.-]+".join(re.escape(p) for p in re.split(r"\$\{\w+\}", n))
        if re.fullmatch(pattern, test):
            return True
    return False


def problems(root):
    guides_dir = root / "docs/guides"
    guides = sorted(p for p in guides_dir.glob("*.md") if p.name != "README.md")
    if not guides:
        yield "docs/guides: no guide"
        return
    index = (guides_dir / "README.md").read_text(encoding="utf-8") if (guides_dir / "README.md").exists() else ""
    names = ctest_names(root)
    for guide in guides:
        text = guide.read_text(encoding="utf-8")
        where = f"docs/guides/{guide.name}"
        if f"({guide.name})" not in index:
            yield f"docs/guides/README.md: does not list {guide.name}"
        examples = [root / p for p in re.findall(r"\]\(\.\./\.\./(examples/[^)#]+)\)", text)]
        if not examples:
            yield f"{where}: links no example (../../examples/...)"
        for e in examples:
            if not e.is_file():
                yield f"{where}: {e.relative_to(root)} does not exist"
        tests = re.findall(r"ctest\s+`([\w.-]+)`", text)
        if not tests:
            yield f"{where}: names no ctest case that runs its example (ctest `NAME`)"
        for t in tests:
            if not named(t, names):
                yield f"{where}: no ctest case {t}"
        sources = [dedented_lines(e) for e in examples if e.is_file()]
        for block in code_blocks(text):
            for seg in segments(block):
                want = [l.strip() for l in seg]
                if not any(doc_check.contains_run(lines, want) for lines in sources):
                    yield f"{where}: a block is not in its examples: {seg[0].strip()!r}"


if __name__ == "__main__":
    sys.exit(doc_check.run("check_guides", problems))
