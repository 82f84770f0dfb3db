#!/bin/bash
# Packs what the GPU machine needs to run the CUDA tests and benchmarks: it has the NVIDIA
# driver and the CUDA toolkit but no Debian -dev packages and no network, and receives only the
# working tree plus carried folders (64 MiB). So the binaries are built here (for sm_90, without
# -march=native and without OpenBLAS) and travel with the shared libraries they need that are
# not part of glibc or of the CUDA toolkit.
#
#   bash scripts/device-bundle.sh BUILD_DIR OUT_DIR
# then, on the device (OUT_DIR carried):  OUT_DIR/run ragkv_tests -tc='cuda*'
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/ragkv" "$build/ragkv_tests" "$out/bin/"
# Every resolved library except glibc's own, the dynamic loader and the CUDA toolkit's.
ldd "$build/ragkv" "$build/ragkv_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/libcuda|/libcublas|/libcudart|/cuda' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
cat > "$out/run" <<'RUN'
#!/bin/bash
# Runs a bundled binary with the bundled libraries first on the search path.
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exe=$1
shift
exec "$here/bin/$exe" "$@"
RUN
chmod +x "$out/run"
echo "device bundle: $out ($(du -sh "$out" | cut -f1)): bin/ $(ls "$out/bin" | tr '\n' ' ')lib/ $(ls "$out/lib" | tr '\n' ' ')"
