#!/bin/bash
# Bundle the installed TVM for a machine that cannot reach PyPI (a lent GPU machine whose Python
# differs from this one's): the Python package without its C++ sources, headers and web files,
# libtvm_compiler.so compressed with xz's x86 filter (259 MB -> 58 MB), and the tvm_ffi wheel for
# the other machine's Python, unpacked without its bundled third-party sources.
#
#     scripts/bundle_tvm.sh .dev 3.12          # writes .dev/{tvm_py.tar.xz,libtvm_compiler.so.xz,tvm_ffi.tar.xz}
#
# On the other machine, from the repository root:
#     mkdir -p /tmp/site && tar -xJf .dev/tvm_py.tar.xz -C /tmp/site && tar -xJf .dev/tvm_ffi.tar.xz -C /tmp/site \
#       && xz -dc .dev/libtvm_compiler.so.xz > /tmp/site/tvm/lib/libtvm_compiler.so
#     export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
out=${1:?usage: scripts/bundle_tvm.sh OUT_DIR [PYTHON_VERSION]}
python_version=${2:-3.12}
site=$(.venv/bin/python -c "import os, tvm; print(os.path.dirname(os.path.dirname(tvm.__file__)))")
ffi_version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('apache-tvm-ffi'))")
mkdir -p "$out"
tar -C "$site" --exclude=tvm/lib/libtvm_compiler.so --exclude=tvm/3rdparty --exclude=tvm/src \
    --exclude=tvm/web --exclude=__pycache__ -cf - tvm | xz -9 > "$out/tvm_py.tar.xz"
xz -T1 --x86 --lzma2=preset=9e,dict=256MiB -c "$site/tvm/lib/libtvm_compiler.so" > "$out/libtvm_compiler.so.xz"
wheels=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d "$wheels" "apache-tvm-ffi==$ffi_version"
(cd "$wheels" && python3 -m zipfile -e ./*.whl unpacked && rm -rf unpacked/tvm_ffi/3rdparty \
    && tar -C unpacked -cf - . | xz -6 > tvm_ffi.tar.xz)
mv "$wheels/tvm_ffi.tar.xz" "$out/"
rm -rf "$wheels"
du -cb "$out"/* | tail -1
