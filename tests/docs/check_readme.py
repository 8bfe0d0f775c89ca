#!/usr/bin/env python3
"""The README and the overview stay what a newcomer can use: the README at
most 120 lines, starting with the two commands; its C++ and Python examples
the very code ctest runs (examples/readme_tour.cpp between its markers,
examples/python/asyncio_quickstart.py); docs/overview.md at most 300 lines,
and no other page under docs/ over 600 (split a page by task instead).
Usage: check_readme.py REPO_ROOT. Prints "check_readme: ok" or what is wrong."""

import re
import sys
import textwrap

import doc_check

README_MAX, OVERVIEW_MAX, PAGE_MAX = 120, 300, 600
COMMANDS = [
    "bash scripts/setup.sh && bash scripts/build.sh && build/bin/hello_store",
    "bash scripts/setup.sh && bash scripts/build.sh && ctest --test-dir build "
    "--output-on-failure -j2",
]


def blocks(text, lang):
    return [m.group(1) for m in re.finditer(r"^```" + lang + r"\n(.*?)^```$", text, re.M | re.S)]


def problems(root):
    readme = (root / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    if len(lines) > README_MAX:
        yield f"README.md: {len(lines)} lines, more than {README_MAX}"
    first = blocks(readme, "bash")
    if not first or first[0].splitlines() != COMMANDS or not readme.startswith("# meshstore\n\n```bash\n"):
        yield "README.md: does not start with the two commands, unchanged"
    tour = (root / "examples/readme_tour.cpp").read_text(encoding="utf-8")
    m = re.search(r"// --- README snippet begins ---\n(.*?)\n\s*// --- README snippet ends ---", tour, re.S)
    if m is None:
        yield "examples/readme_tour.cpp: no README snippet markers"
    else:
        snippet = textwrap.dedent(m.group(1))
        if not any(doc_check.contains_run(b.splitlines(), snippet.splitlines())
                   for b in blocks(readme, "cpp")):
            yield "README.md: its C++ example is not examples/readme_tour.cpp's snippet"
    quick = (root / "examples/python/asyncio_quickstart.py").read_text(encoding="utf-8")
    code = re.sub(r'\A""".*?"""\n', "", quick, flags=re.S)
    if code not in blocks(readme, "python"):
        yield "README.md: its Python example is not examples/python/asyncio_quickstart.py"
    overview = root / "docs/overview.md"
    if not overview.exists():
        yield "docs/overview.md: missing"
    elif len(overview.read_text(encoding="utf-8").splitlines()) > OVERVIEW_MAX:
        yield f"docs/overview.md: more than {OVERVIEW_MAX} lines"
    for page in sorted((root / "docs").rglob("*.md")):
        n = len(page.read_text(encoding="utf-8").splitlines())
        if page != overview and n > PAGE_MAX:
            yield f"{page.relative_to(root)}: {n} lines, more than {PAGE_MAX}: split it by task"


if __name__ == "__main__":
    sys.exit(doc_check.run("check_readme", problems))
