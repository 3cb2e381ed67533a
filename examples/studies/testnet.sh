#!/usr/bin/env bash
# Runs a study that needs test hosts: brings up HOSTS (default 4) hosts of
# scripts/testhosts.sh with one slot each and RATE (default 1gbit) links,
# builds gorun, the trainer and the studies, runs
#   bin/studies -hosts '--ssh ... -hostfile ...' [FLAGS...] STUDY
# and takes the hosts down. Needs root.
#   bash examples/studies/testnet.sh horovod
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
tn=${TESTNET:-$repo/scripts/testhosts.sh}
export TESTNET_DIR=${TESTNET_DIR:-/tmp/gorun-studies-testnet}
cd "$repo"
make build >/dev/null
CGO_ENABLED=0 go build -o bin/fmnist ./examples/fmnist
go build -o bin/studies ./examples/studies
bash "$tn" up "${HOSTS:-4}" --slots 1 --rate "${RATE:-1gbit}" >/dev/null
trap 'bash "$tn" down >/dev/null' EXIT
# shellcheck disable=SC1091
. "$TESTNET_DIR/env"
bin/studies -hosts "--ssh '$TESTNET_SSH' -hostfile $TESTNET_HOSTFILE" "$@"
