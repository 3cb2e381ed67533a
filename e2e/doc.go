// Package e2e holds gorun's end-to-end tests over real SSH: the tests bring
// up several hosts in network namespaces with scripts/testhosts.sh,
// start gorun against them and check what happens inside the hosts.
//
// They need root, sshd and iproute2 (`make test` installs them with
// scripts/testdeps.sh). Without them the tests skip, unless
// GORUN_REQUIRE_TESTNET=1 (which `make test` sets as root), which makes
// them fail.
// Only one test binary may use the rig at a time, which is why every test
// that needs it lives in this package.
package e2e
