#!/bin/bash
# Packs what the GPU machine needs to run the CUDA tests and benchmarks: it has the NVIDIA
# driver and the CUDA toolkit but no Debian -dev packages and no network, and receives only the
# working tree plus carried folders (64 MiB). So the binaries are built here (for sm_90, without
# -march=native and without OpenBLAS) and travel with the shared libraries they need that are
# not part of glibc or of the CUDA toolkit — xz-compressed in one archive (about a quarter of
# their 49 MB), which `run` unpacks beside itself on its first call (with python3's tarfile, which
# the device's image has; its xz tool is not certain).
#
#   bash scripts/device-bundle.sh BUILD_DIR OUT_DIR
# then, on the device (OUT_DIR carried):  OUT_DIR/run ragkv_tests -tc='cuda*'
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
rm -rf "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out" "$stage/bin" "$stage/lib"
cp "$build/ragkv" "$build/ragkv_tests" "$stage/bin/"
# Every resolved library except glibc's own, the dynamic loader and the CUDA toolkit's.
ldd "$build/ragkv" "$build/ragkv_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/libcuda|/libcublas|/libcudart|/cuda' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar -C "$stage" -cf - bin lib | xz -T0 -6 > "$out/bundle.tar.xz"
cat > "$out/run" <<'RUN'
#!/bin/bash
# Runs a bundled binary with the bundled libraries first on the search path:
#   run ragkv|ragkv_tests [ARGS...]
# The first call unpacks bundle.tar.xz into unpacked/ (49 MB: run it on the device, not here, or
# the carried folder outgrows the device tool's limit), built apart and then renamed, so that a
# concurrent first call keeps the one that got there first; unpacked/ from another archive (its
# size and time in unpacked/.archive) is replaced.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ]; then
  echo "usage: $0 ragkv|ragkv_tests [ARGS...]" >&2
  exit 2
fi
archive=$(stat -c '%s %Y' "$here/bundle.tar.xz")
if [ -d "$here/unpacked" ] && [ "$(cat "$here/unpacked/.archive" 2> /dev/null)" != "$archive" ]; then
  rm -rf "$here/unpacked"
fi
if [ ! -d "$here/unpacked" ]; then
  tmp=$(mktemp -d "$here/.unpacking.XXXXXX")
  unpack='import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    if hasattr(tarfile, "fully_trusted_filter"):
        t.extractall(sys.argv[2], filter="fully_trusted")  # our own archive: modes kept, no warning
    else:
        t.extractall(sys.argv[2])'
  if ! python3 -c "$unpack" "$here/bundle.tar.xz" "$tmp"; then
    rm -rf "$tmp"
    echo "run: cannot unpack $here/bundle.tar.xz" >&2
    exit 1
  fi
  echo "$archive" > "$tmp/.archive"
  mv -T "$tmp" "$here/unpacked" 2> /dev/null || rm -rf "$tmp"  # another call's is there: that one
  [ -x "$here/unpacked/bin/$1" ] || { echo "run: $here/unpacked/bin/$1 is missing" >&2; exit 1; }
fi
export LD_LIBRARY_PATH="$here/unpacked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exe=$1
shift
exec "$here/unpacked/bin/$exe" "$@"
RUN
chmod +x "$out/run"
echo "device bundle: $out ($(du -sh "$out" | cut -f1), unpacked $(du -sh "$stage" | cut -f1)): bin/ $(ls "$stage/bin" | tr '\n' ' ')lib/ $(ls "$stage/lib" | tr '\n' ' ')"
