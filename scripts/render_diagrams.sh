#!/usr/bin/env bash
# Renders the docs' pictures from their text sources with Graphviz
# (Debian's graphviz: apt-get install graphviz): docs/images/NAME.dot ->
# docs/images/NAME.svg. Run it after changing a .dot file and commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v dot > /dev/null; then
  echo "render_diagrams: Graphviz's dot is not installed (apt-get install graphviz)" >&2
  exit 1
fi
for src in docs/images/*.dot; do
  out="${src%.dot}.svg"
  dot -Tsvg "$src" -o "$out.tmp"
  mv "$out.tmp" "$out"
  echo "render_diagrams: $src -> $out"
done
