#!/usr/bin/env bash
# Horovod's own PyTorch tests on gorun.horovod: Horovod v0.28.1's
# test/parallel/test_torch.py, unchanged but for its imports, run under
# gorun as Horovod's CI runs it under horovodrun (the whole file in one
# job), and counted.
#
#   bash scripts/horovod-suite.sh HOROVOD_SRC [NP] [OUT]
#
# HOROVOD_SRC: a checkout of Horovod at v0.28.1 (the repository carries no
# Horovod code; only these two of its files are read:
# test/parallel/test_torch.py and test/utils/common.py). NP: ranks
# (default 2). OUT: where the job's output goes (default a new temporary
# directory). Needs `make build python` first and Debian's python3-pytest
# and python3-packaging.
#
# The changes to Horovod's files, and nothing else: `import horovod.torch
# as hvd` becomes `import gorun.horovod as hvd`; common.py sits beside the
# test (not in ../utils); common.py's imports of cloudpickle, mock and
# horovod.runner (which the torch tests do not use) are dropped. Each rank
# gets HOROVOD_RANK and HOROVOD_SIZE, as horovodrun sets them (two of the
# tests run only when HOROVOD_RANK is set).
#
# Prints rank 0's pytest summary, its skips with their reasons, and one
# line "horovod-suite np=N tests=T passed=P failed=F skipped=S gpu_only=G".
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: horovod-suite.sh HOROVOD_SRC [NP] [OUT]}
np=${2:-2}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
for f in test/parallel/test_torch.py test/utils/common.py; do
    [ -f "$src/$f" ] || { echo "horovod-suite: no $src/$f" >&2; exit 2; }
done
[ -x "$repo/bin/gorun" ] && [ -f "$repo/python/gorun/libgorun.so" ] ||
    { echo "horovod-suite: run 'make build python' first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src/test/parallel/test_torch.py" "$src/test/utils/common.py" "$work/"
sed -i 's/^import horovod.torch as hvd$/import gorun.horovod as hvd/' "$work/test_torch.py"
sed -i "s#os.path.join(os.path.dirname(__file__), os.pardir, 'utils')#os.path.dirname(__file__)#" "$work/test_torch.py"
sed -i -e 's/^import cloudpickle$/# &/' -e 's/^import mock$/# &/' \
    -e 's/^from horovod.runner.util.threads import in_thread$/# &/' "$work/common.py"
grep -q '^import gorun.horovod as hvd$' "$work/test_torch.py" ||
    { echo "horovod-suite: test_torch.py does not import horovod.torch as hvd (not v0.28.1?)" >&2; exit 2; }
cd "$work" || exit 2
PYTHONPATH=$repo/python "$repo/bin/gorun" --tag-output -np "$np" /bin/sh -c \
    'HOROVOD_RANK=$GORUN_RANK HOROVOD_SIZE=$GORUN_SIZE exec /usr/bin/python3 -m pytest -v -rs -p no:cacheprovider test_torch.py' \
    >"$out/job.log" 2>&1
rc=$?
# Rank 0's lines, without the tag.
sed -n 's/^\[0\] \{0,1\}//p' "$out/job.log" >"$out/rank0.log"
summary=$(grep -E '^=+ .*(passed|failed).* in [0-9.]+s' "$out/rank0.log" | tail -1)
count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
passed=$(count passed)
failed=$(count failed)
skipped=$(count skipped)
errors=$(count error)
gpu=$(grep -E '^SKIPPED' "$out/rank0.log" | grep -ciE 'gpu|cuda')
grep -E '^(SKIPPED|FAILED|ERROR)' "$out/rank0.log"
echo "$summary"
echo "horovod-suite np=$np tests=$((passed + failed + skipped + errors)) passed=$passed failed=$((failed + errors)) skipped=$skipped gpu_only=$gpu exit=$rc (output: $out)"
[ "$rc" = 0 ]
