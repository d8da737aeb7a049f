"""The demo repository's build: the kernel stack installed into the image's venv, plus one compiled piece.

`bisect demo run` builds each commit's worker image once (`--image venv`): `build.sh` installs the stack with
uv into the image's virtualenv (offline, editable, from the checkout) and compiles `native/accept.c` into
`kernels/_accept.so` (through ccache where it is installed). Only the files in IMAGE_INPUTS key an image, so a
commit that changes docs, tests or CI files reuses the image of the commit before it.
"""

from __future__ import annotations

BUILD_CMD = "bash build.sh"
IMAGE_INPUTS = ("kernels", "native", "build.sh", "pyproject.toml")

BUILD_SCRIPT = """#!/usr/bin/env bash
# The stack installed into the image's venv, and its one compiled piece (kernels/native.py loads it).
set -euo pipefail
uv pip install --quiet --offline --no-deps --no-build-isolation -e .
compiler=(${CC:-cc})
if command -v "${compiler[-1]}" > /dev/null 2>&1; then
  "${compiler[@]}" -O2 -fPIC -c -o native/accept.o native/accept.c
  "${compiler[@]}" -shared -o kernels/_accept.so native/accept.o
  echo "built kernels/_accept.so"
else
  echo "no C compiler (${compiler[-1]}): the accepted-prefix count runs in Python"
fi
"""

ACCEPT_C = """/* The accepted prefix of speculative decoding: how many drafted tokens the verify pass predicted too. */
int accepted_prefix(const long *drafts, const long *predicted, int k) {
    int accepted = 0;
    while (accepted < k && drafts[accepted] == predicted[accepted]) {
        accepted++;
    }
    return accepted;
}
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "demo-kernel-stack"
version = "0.1.0"
requires-python = ">=3.11"

[tool.setuptools.packages.find]
include = ["kernels*"]
"""

FILES = {"build.sh": BUILD_SCRIPT, "native/accept.c": ACCEPT_C, "pyproject.toml": PYPROJECT}
