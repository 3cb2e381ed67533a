// Package e2e holds gorun's end-to-end tests over real SSH: the tests bring
// up several hosts in network namespaces with ../shared/testnet/testnet.sh,
// start gorun against them and check what happens inside the hosts.
//
// They need root, sshd and iproute2 (.ci/run installs them). Without them
// the tests skip, unless GORUN_REQUIRE_TESTNET=1, which makes them fail.
// Only one test binary may use the rig at a time, which is why every test
// that needs it lives in this package.
package e2e
