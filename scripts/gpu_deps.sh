#!/usr/bin/env bash
# Run here, before a GPU check: the GPU machine reaches no package registry, so the
# C++ libraries the build needs besides libtorch (JSON, YAML, CLI11, GoogleTest, and Gloo's
# headers, which c10d's ProcessGroupGloo.hpp includes and the torch wheel lacks) travel
# with the working tree as Debian packages unpacked into .gpu/root (ignored by git;
# `run` carries it: carry [".gpu"]). About 1 MB of packages, 7 MB unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu/debs .gpu/root
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
cd .gpu/debs
apt-get download nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libgtest-dev libgmock-dev libgloo-dev
for f in *.deb; do dpkg -x "$f" ../root; done
echo "unpacked into $(pwd)/../root: $(ls | tr '\n' ' ')"
