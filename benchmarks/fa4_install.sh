#!/usr/bin/env bash
# Install FlashAttention 4 on the lent GPU machine from the folders benchmarks/fa4_wheels.sh laid out,
# carried over two device calls (one call carries at most 64 MiB; the DSL runtime wheel alone is 92 MB):
#
#   call 1 carries .fa4/part1: its piece is checked and staged in $TL_FA4_DIR/parts, outside the checkout,
#          because the next call replaces the carried paths (the machine keeps /tmp while it stays warm);
#   call 2 carries .fa4/part2: the big wheel is rebuilt from both pieces (sha256 checked against
#          MANIFEST.txt), every wheel goes into $TL_FA4_DIR/site (`pip install --no-index --no-deps --target`),
#          and `from flash_attn.cute import flash_attn_func` must import from there.
#
#   bash benchmarks/fa4_install.sh      # run_on_device.sh calls it first, in every mode
#
# Python must read the site dir through `import site; site.addsitedir(DIR)`: the DSL registers its
# packages with a .pth file, which PYTHONPATH alone does not read (run_on_device.sh writes a
# sitecustomize.py for that). The last line of a successful run is `TL_FA4_SITE=DIR`.
# Exit status: 0 installed (now or earlier on this machine), 3 part 1 staged (send call 2 now),
# 4 nothing carried and nothing installed earlier (FA4 stays off), 1 anything wrong (message says what).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT="$PWD"
DIR="${TL_FA4_DIR:-/tmp/tl-fa4}"
PYTHON="${TL_FA4_PYTHON:-python3}"
P1="$ROOT/.fa4/part1"
P2="$ROOT/.fa4/part2"
PARTS="$DIR/parts"
SITE="$DIR/site"
MARK="$SITE/.tl-fa4-installed"  # the manifest of the layout installed there, written after the import check

say() { echo "fa4: $*"; }
fail() { echo "fa4: error: $*"; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
mib() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
field() {  # manifest kind [key] -> the first matching line's fields after the kind
    awk -v k="$2" -v key="${3:-}" '$1 == k && (key == "" || $2 == key) { $1 = ""; print substr($0, 2); exit }' "$1"
}
check_sha() {  # file expected what
    [ -f "$1" ] || fail "$3 is missing: $1"
    local got
    got=$(sha "$1")
    [ "$got" = "$2" ] || fail "checksum mismatch for $3 ($1): sha256 $got, MANIFEST.txt says $2 (a damaged or partial carry, or a layout from another fa4_wheels.sh run; run it again and resend both calls)"
}
import_check() {  # site dir -> 0 when flash_attn.cute imports from it
    timeout 240 "$PYTHON" -c 'import sys, site; site.addsitedir(sys.argv[1]); from flash_attn.cute import flash_attn_func; import flash_attn.cute as m; print(m.__file__)' "$1" >"$DIR/import.log" 2>&1
}
ready() {
    say "ready: flash_attn.cute imports from $SITE ($(tail -n1 "$DIR/import.log"))"
    echo "TL_FA4_SITE=$SITE"
    exit 0
}

if [ ! -d "$P1" ] && [ ! -d "$P2" ]; then
    if [ -f "$MARK" ]; then
        mkdir -p "$DIR"
        import_check "$SITE" || fail "installed earlier in $SITE, but the import fails now: $(tail -n 3 "$DIR/import.log")"
        ready
    fi
    say "no .fa4/part1 or .fa4/part2 carried and nothing installed earlier in $SITE: the fa4 baseline stays off (benchmarks/fa4_wheels.sh and docs/performance.md say how to carry it)"
    exit 4
fi

mkdir -p "$PARTS" || fail "cannot create $PARTS"

if [ -d "$P1" ]; then
    [ -f "$P1/MANIFEST.txt" ] || fail ".fa4/part1 has no MANIFEST.txt: lay it out again with benchmarks/fa4_wheels.sh"
    read -r _ piece1 sum1 <<<"$(field "$P1/MANIFEST.txt" piece part1)"
    [ -n "${piece1:-}" ] || fail ".fa4/part1/MANIFEST.txt names no piece for part1"
    check_sha "$P1/$piece1" "$sum1" "the carried piece 1"
    cp "$P1/$piece1" "$PARTS/$piece1" || fail "cannot copy piece 1 to $PARTS"
    cp "$P1/MANIFEST.txt" "$PARTS/MANIFEST.part1.txt" || fail "cannot copy MANIFEST.txt to $PARTS"
    say "staged piece 1 ($piece1, $(mib "$PARTS/$piece1")) in $PARTS"
    if [ ! -d "$P2" ]; then
        say "part 1 of 2 staged: send call 2 carrying .fa4/part2 now, while this machine is warm (a released machine loses $DIR)"
        exit 3
    fi
fi

M="$P2/MANIFEST.txt"
[ -f "$M" ] || fail ".fa4/part2 has no MANIFEST.txt: lay it out again with benchmarks/fa4_wheels.sh"
if [ -f "$MARK" ] && cmp -s "$M" "$MARK"; then
    import_check "$SITE" && ready
    say "installed earlier in $SITE but the import fails now; installing again"
fi
[ -f "$PARTS/MANIFEST.part1.txt" ] \
    || fail "piece 1 is not staged in $PARTS: call 1 (carry .fa4/part1) must run first, on this same machine while it stays warm; a machine released in between starts empty, so send both calls again, the second right after the first"
cmp -s "$M" "$PARTS/MANIFEST.part1.txt" \
    || fail "the piece staged in $PARTS comes from another benchmarks/fa4_wheels.sh layout than .fa4/part2: carry part1 and part2 of the same run"

read -r big big_sum <<<"$(field "$M" big)"
read -r _ piece1 sum1 <<<"$(field "$M" piece part1)"
read -r _ piece2 sum2 <<<"$(field "$M" piece part2)"
if [ -z "${big:-}" ] || [ -z "${piece1:-}" ] || [ -z "${piece2:-}" ]; then fail "$M lacks its big/piece lines"; fi
check_sha "$PARTS/$piece1" "$sum1" "the staged piece 1"
check_sha "$P2/$piece2" "$sum2" "the carried piece 2"
cat "$PARTS/$piece1" "$P2/$piece2" >"$PARTS/$big.tmp" || fail "cannot write $PARTS/$big.tmp"
check_sha "$PARTS/$big.tmp" "$big_sum" "the rebuilt $big"
mv "$PARTS/$big.tmp" "$PARTS/$big"
say "rebuilt $big ($(mib "$PARTS/$big")) from its two pieces, sha256 checked"

wheels=()
while read -r name sum; do
    path="$P2/$name"
    [ "$name" = "$big" ] && path="$PARTS/$big"
    check_sha "$path" "$sum" "wheel $name"
    wheels+=("$path")
done < <(awk '$1 == "wheel" { print $2, $3 }' "$M")
while read -r module name sum; do
    if "$PYTHON" -c "import $module" >/dev/null 2>&1; then
        say "$module: the image's own (not installing $name)"
        continue
    fi
    check_sha "$P2/$name" "$sum" "wheel $name"
    wheels+=("$P2/$name")
done < <(awk '$1 == "extra" { print $2, $3, $4 }' "$M")
[ "${#wheels[@]}" -gt 0 ] || fail "$M lists no wheels"

rm -rf "$SITE"
say "installing ${#wheels[@]} wheels into $SITE"
timeout 300 "$PYTHON" -m pip install --no-index --no-deps --disable-pip-version-check --target "$SITE" \
    "${wheels[@]}" >"$DIR/pip.log" 2>&1 \
    || fail "pip install into $SITE failed; the end of $DIR/pip.log:
$(tail -n 15 "$DIR/pip.log")"
import_check "$SITE" || fail "installed into $SITE, but 'from flash_attn.cute import flash_attn_func' fails:
$(tail -n 15 "$DIR/import.log")"
cp "$M" "$MARK"
ready
