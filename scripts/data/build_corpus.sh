#!/usr/bin/env bash
# Rebuilds data/corpus.txt.gz, keel's embedded default corpus, from Debian's
# bible-kjv packages (the King James Version, 1611; public domain).
#
#   scripts/data/build_corpus.sh            download, extract, write data/corpus.txt.gz
#   scripts/data/build_corpus.sh --check    rebuild into a temp dir and compare with the committed file
#
# Needs apt-get (to download the two .deb files; nothing is installed),
# dpkg-deb, awk and gzip. The output is byte-identical across runs: the
# package versions, the data package's SHA-256 and the SHA-256 of the
# resulting text are pinned below (the reader program is architecture
# specific, so its .deb is not), awk runs in the C locale, and gzip -n stores
# no name or timestamp.
#
# Format: one document per chapter (1,189 documents). A document is the
# chapter heading ("Genesis 1") followed by one verse per line, verse numbers
# removed; documents are separated by a line "<|endoftext|>", the default
# data.doc_separator (the convention of TinyStories and GPT-2 text dumps).
set -euo pipefail
cd "$(dirname "$0")/../.."

version=4.38
declare -A sha256=(
  [bible-kjv-text_${version}_all.deb]=d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a
)
text_sha256=fb4e22eb766f8276e173293054bfa29e4017689ff1df65199fbee1bee4ee16c4
out=data/corpus.txt.gz
[ "${1:-}" = "--check" ] && out=""

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# bible-kjv-text holds the compressed text; bible-kjv the reader program
# that decompresses it. Both are "unrestricted use" (Chip Chapin's BRS);
# the text itself is out of copyright.
apt-get download "bible-kjv-text=${version}" "bible-kjv=${version}" >/dev/null 2>download.log || {
  cat download.log >&2
  echo "build_corpus: apt-get download failed (is bible-kjv ${version} in your apt sources? try apt-get update)" >&2
  exit 1
}
for deb in "${!sha256[@]}"; do
  echo "${sha256[$deb]}  $deb" | sha256sum --check --quiet || {
    echo "build_corpus: $deb does not have the pinned SHA-256; the output would differ" >&2
    exit 1
  }
done
for deb in ./*.deb; do dpkg-deb -x "$deb" root; done

# -f turns pretty-printing off for references; without it the program prints
# "Book N" headings and indented, numbered verses, which we want. A huge -l
# disables line wrapping so each verse stays on one line.
./root/usr/bin/bible -p "$work/root/usr/lib" -l 1000000 "Gen1:1-Rev22:21" > raw.txt
# Headings are the unindented non-empty lines; verses are "  N text".
LC_ALL=C awk '
  /^$/ { next }
  /^  [0-9]+ / { sub(/^  [0-9]+ /, ""); print; next }
  { if (n++ > 0) print "<|endoftext|>"; print }
' raw.txt > corpus.txt

echo "$text_sha256  corpus.txt" | sha256sum --check --quiet || {
  echo "build_corpus: the extracted text does not have the pinned SHA-256 $text_sha256" >&2
  exit 1
}
docs=$(grep -c '^<|endoftext|>$' corpus.txt)
[ "$docs" -eq 1188 ] || { echo "build_corpus: expected 1189 chapters, got $((docs + 1))" >&2; exit 1; }

gzip -n -9 -c corpus.txt > corpus.txt.gz
cd - >/dev/null
if [ -z "$out" ]; then
  if cmp -s "$work/corpus.txt.gz" data/corpus.txt.gz; then
    echo "build_corpus: data/corpus.txt.gz is up to date"
  else
    echo "build_corpus: data/corpus.txt.gz differs from a fresh build" >&2
    exit 1
  fi
else
  cp "$work/corpus.txt.gz" "$out"
  echo "build_corpus: wrote $out ($(stat -c %s "$out") bytes; $(wc -c < "$work/corpus.txt") uncompressed, $((docs + 1)) documents)"
fi
sha256sum "$work/corpus.txt.gz" | cut -d' ' -f1
