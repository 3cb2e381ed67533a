#!/bin/sh
# Builds gorun's PMI-1 client library for Open MPI: build.sh OUT.so
# The one place its compiler flags live (make pmilib and the test that the
# embedded copy is this source's both use it). No build id, stripped, and
# source paths mapped, so that one gcc gives the same bytes everywhere.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
${CC:-gcc} -shared -fPIC -O2 -Wall -Wextra -Werror -fvisibility=hidden \
    -ffile-prefix-map="$here"=. -Wl,--build-id=none -s \
    -o "$1" "$here/gorunpmi.c"
