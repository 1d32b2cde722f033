#!/usr/bin/env bash
# Fetch FlashAttention 4 (`flash-attn-4`) and its CuTe DSL runtime for the lent H200 and lay them out for
# two device calls. Run here, on a machine with PyPI access:
#
#   bash benchmarks/fa4_wheels.sh              # download (pinned versions) into .fa4/download, then lay out
#   bash benchmarks/fa4_wheels.sh --from DIR   # lay out wheels already in DIR (no download)
#
# The device (python 3.12, torch 2.11+cu130) takes at most 64 MiB of carried files per call, and the DSL's
# runtime wheel (nvidia-cutlass-dsl-libs-cu13) alone is 92 MB, so it is split in two pieces:
#   .fa4/part1/  the first piece                     -> carry in call 1 (with .whl/)
#   .fa4/part2/  the second piece and every other wheel -> carry in call 2 (with .whl/)
# The split point balances the two folders. Both get MANIFEST.txt (sha256 of every file and of the whole
# big wheel); benchmarks/fa4_install.sh on the device checks it, rebuilds the wheel and installs.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$PWD"
FA4="$ROOT/.fa4"
LIMIT_MIB="${TL_FA4_CARRY_LIMIT_MIB:-60}"  # per call, .whl/ included; the hard limit is 64 MiB
PYTHON="${TL_FA4_PYTHON:-python3}"

# Pinned: the versions this layout was made and checked with (flash-attn-4 is published as pre-releases).
PACKAGES=(
    flash-attn-4==4.0.0b36
    nvidia-cutlass-dsl==4.8.1
    nvidia-cutlass-dsl-libs-base==4.8.1
    nvidia-cutlass-dsl-libs-core==4.8.1
    nvidia-cutlass-dsl-libs-cu13==4.8.1
    apache-tvm-ffi==0.1.15.post2
    torch-c-dlpack-ext==0.1.5
    quack-kernels==0.6.5
)
# Dependencies the device image may lack: installed there only when their module does not import.
# `module=requirement`.
EXTRAS=(
    einops=einops==0.8.2
    google.protobuf=protobuf==7.36.2
)
BIG_GLOB='nvidia_cutlass_dsl_libs_cu13-*.whl'

die() { echo "fa4_wheels: error: $*" >&2; exit 1; }
wheel_glob() {  # requirement -> file glob of its wheel (names are normalised to underscores)
    local name="${1%%==*}"
    echo "${name//-/_}-*.whl"
}
one_wheel() {  # dir requirement -> path of its single wheel
    local matches
    # shellcheck disable=SC2207
    matches=($(compgen -G "$1/$(wheel_glob "$2")" || true))
    [ "${#matches[@]}" -eq 1 ] || die "expected one wheel for $2 in $1, found ${#matches[@]}: ${matches[*]:-none}"
    echo "${matches[0]}"
}

SRC=""
if [ "${1:-}" = "--from" ]; then
    SRC="$(cd "${2:?--from needs a directory}" && pwd)"
elif [ "$#" -gt 0 ]; then
    die "usage: bash benchmarks/fa4_wheels.sh [--from DIR]"
fi

if [ -z "$SRC" ]; then
    SRC="$FA4/download"
    mkdir -p "$SRC"
    reqs=("${PACKAGES[@]}")
    for e in "${EXTRAS[@]}"; do reqs+=("${e#*=}"); done
    # cp312 manylinux x86_64 wheels for the device, whatever this machine's python is.
    "$PYTHON" -m pip download --quiet --pre --no-deps --only-binary=:all: --dest "$SRC" \
        --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
        "${reqs[@]}" || die "pip download failed (needs PyPI access)"
fi

# Every wheel, in install order (the DSL before its users); then the extras.
WHEELS=()
for r in "${PACKAGES[@]}"; do WHEELS+=("$(one_wheel "$SRC" "$r")"); done
EXTRA_LINES=()
for e in "${EXTRAS[@]}"; do
    EXTRA_LINES+=("${e%%=*} $(basename "$(one_wheel "$SRC" "${e#*=}")")")
done

echo "fa4_wheels: wheels (from $SRC):"
for w in "${WHEELS[@]}"; do printf '  %10d  %s\n' "$(stat -c %s "$w")" "$(basename "$w")"; done
for l in "${EXTRA_LINES[@]}"; do
    printf '  %10d  %s (only if the image lacks %s)\n' "$(stat -c %s "$SRC/${l#* }")" "${l#* }" "${l%% *}"
done

# Requires-Dist of every wheel must be covered: by this list, by the device image, or deliberately left out.
"$PYTHON" - "$SRC" "${WHEELS[@]}" "${EXTRA_LINES[@]#* }" <<'EOF' || die "a wheel needs a package not accounted for"
import re, sys, zipfile
from pathlib import Path

src, names = Path(sys.argv[1]), sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
have = {norm(Path(n).name.split("-")[0]) for n in names}
image = {  # in the H200 image (python 3.12, torch 2.11+cu130) or carried in .whl/
    "torch": "image", "cuda-bindings": "image (13.3)", "numpy": "image", "triton": "image",
    "typing-extensions": ".whl/ and image",
    # nvidia-cutlass-dsl lists its CUDA 12 runtime unconditionally; the cu13 one replaces it on the device.
    "nvidia-cutlass-dsl-libs-cu12": "left out: the cu13 runtime is installed instead",
}
missing = []
for name in names:
    path = Path(name) if Path(name).is_absolute() else src / name
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        marker = req.split(";", 1)[1] if ";" in req else ""
        if "extra ==" in marker or re.search(r'python_version\s*<\s*"3\.(1[01]|[0-9])"', marker):
            continue  # an optional extra, or only for pythons older than the device's 3.12
        dep = norm(re.match(r"[A-Za-z0-9._-]+", req).group(0))
        if dep not in have and dep not in image:
            missing.append(f"{path.name} requires {req!r}")
        elif dep in image and dep not in have:
            print(f"  {path.name}: {dep} <- {image[dep]}")
for m in missing:
    print(f"fa4_wheels: not covered: {m}", file=sys.stderr)
sys.exit(1 if missing else 0)
EOF

BIG="$(one_wheel "$SRC" nvidia-cutlass-dsl-libs-cu13)"
# shellcheck disable=SC2053  # a glob match on purpose
[[ "$(basename "$BIG")" == $BIG_GLOB ]] || die "unexpected big wheel name $BIG"
big_size=$(stat -c %s "$BIG")
rest_size=0
for w in "${WHEELS[@]}"; do [ "$w" = "$BIG" ] || rest_size=$((rest_size + $(stat -c %s "$w"))); done
for l in "${EXTRA_LINES[@]}"; do rest_size=$((rest_size + $(stat -c %s "$SRC/${l#* }"))); done
# First piece: half of everything carried, so both calls carry about the same; at least half the big wheel
# (two pieces exactly) and less than all of it.
piece1=$(( (big_size + rest_size + 1) / 2 ))
[ "$piece1" -lt $(( (big_size + 1) / 2 )) ] && piece1=$(( (big_size + 1) / 2 ))
[ "$piece1" -ge "$big_size" ] && piece1=$((big_size - 1))

rm -rf "$FA4/part1" "$FA4/part2"
mkdir -p "$FA4/part1" "$FA4/part2"
big_name="$(basename "$BIG")"
split -b "$piece1" -d -a 1 "$BIG" "$FA4/part1/$big_name.part"
[ -f "$FA4/part1/$big_name.part1" ] || die "split made one piece only"
[ -f "$FA4/part1/$big_name.part2" ] && die "split made more than two pieces"
mv "$FA4/part1/$big_name.part1" "$FA4/part2/"
for w in "${WHEELS[@]}"; do [ "$w" = "$BIG" ] || cp "$w" "$FA4/part2/"; done
for l in "${EXTRA_LINES[@]}"; do cp "$SRC/${l#* }" "$FA4/part2/"; done

# One manifest, in both folders: call 2 checks that call 1 staged the piece of the same layout.
sha() { sha256sum "$1" | cut -d' ' -f1; }
manifest="$FA4/part2/MANIFEST.txt"
{
    echo "# benchmarks/fa4_wheels.sh layout; kinds: big NAME SHA256 (rebuilt from its pieces), piece PART NAME"
    echo "# SHA256, wheel NAME SHA256 (installed in this order), extra MODULE NAME SHA256 (if MODULE is missing)"
    echo "big $big_name $(sha "$BIG")"
    echo "piece part1 $big_name.part0 $(sha "$FA4/part1/$big_name.part0")"
    echo "piece part2 $big_name.part1 $(sha "$FA4/part2/$big_name.part1")"
    for w in "${WHEELS[@]}"; do echo "wheel $(basename "$w") $(sha "$w")"; done
    for l in "${EXTRA_LINES[@]}"; do echo "extra $l $(sha "$SRC/${l#* }")"; done
} >"$manifest"
cp "$manifest" "$FA4/part1/MANIFEST.txt"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
whl_bytes=0
if [ -d "$ROOT/.whl" ]; then
    whl_bytes=$(du -sb "$ROOT/.whl" | cut -f1)
else
    echo "fa4_wheels: note: no .whl/ here; sizes below leave it out"
fi
status=0
echo "fa4_wheels: carry folders (limit ${LIMIT_MIB} MiB per call with .whl/ = $(mib "$whl_bytes") MiB):"
for part in part1 part2; do
    bytes=$(du -sb "$FA4/$part" | cut -f1)
    total=$((bytes + whl_bytes))
    echo "  .fa4/$part: $(mib "$bytes") MiB; with .whl/: $(mib "$total") MiB"
    if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
        echo "fa4_wheels: error: .fa4/$part with .whl/ is over ${LIMIT_MIB} MiB" >&2
        status=1
    fi
done
echo "fa4_wheels: call 1: carry [\".whl\", \".fa4/part1\"]; call 2 (at once, machine still warm): carry [\".whl\", \".fa4/part2\"]"
exit "$status"
