GO ?= go
PKGS := ./...

.PHONY: build python install-python wheel pmilib deps test test-debian13 test-short check fuzz bench integ demo clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o bin/gorun ./cmd/gorun

# The Python package's library, python/gorun/libgorun.so: gorun's collectives
# behind a C ABI (capi/), which gorun.torch loads. Needs gcc (cgo); the gorun
# binary itself stays static and cgo-free. Then gorun.torch's native fast
# path, python/gorun/_torchc-TORCHVERSION.so, built against $(PYTHON)'s
# PyTorch (python/csrc/build.py; needs g++, libtorch-dev and pybind11-dev,
# and says so and builds nothing without them).
PYTHON ?= /usr/bin/python3
python:
	CGO_ENABLED=1 $(GO) build -trimpath -buildmode=c-shared -o python/gorun/libgorun.so ./capi
	rm -f python/gorun/libgorun.h
	$(PYTHON) python/csrc/build.py python/gorun

# Copies the package (python/gorun) into $(PYTHON)'s site-packages: the
# system's as root, the user's otherwise. Ranks that gorun starts then find
# it; so does any PYTHONPATH that holds python/.
install-python: python
	@dir=$$($(PYTHON) -c 'import os, site; print(site.getsitepackages()[0] if os.geteuid() == 0 else site.getusersitepackages())') && \
	  mkdir -p "$$dir" && rm -rf "$$dir/gorun" && cp -r python/gorun "$$dir/gorun" && rm -rf "$$dir/gorun/__pycache__" && \
	  echo "installed gorun for $(PYTHON) in $$dir/gorun"

# The wheel, dist/gorun-VERSION-py3-none-linux_ARCH.whl (python/mkwheel): the
# Python package with libgorun.so, and the static gorun binary, which pip
# installs as the environment's gorun command. VERSION is python/gorun's
# __version__, which gorun --version prints too. Built here from Go and
# gcc alone (no build backend, no network); needs gcc as `make python` does,
# and holds the native fast path built for $(PYTHON)'s PyTorch when it can.
wheel:
	$(GO) run ./python/mkwheel -go $(GO) -python $(PYTHON) -o dist

# gorun's PMI-1 client library for Open MPI 4, embedded in gorun. The built
# copy is committed (so that `go install` gives a gorun that runs Open MPI
# programs too); rebuild it after changing pmi/libpmi/gorunpmi.c. The test
# in pmi/pmilib fails when the committed copy is not this source's.
pmilib:
	sh pmi/libpmi/build.sh pmi/pmilib/libgorunpmi-$$($(GO) env GOARCH).so
	gcc --version | head -1 > pmi/pmilib/libgorunpmi-$$($(GO) env GOARCH).so.gcc

# The Debian packages the tests need (sshd, iproute2, iptables, MPICH, the
# real Fashion-MNIST; the list is in the script): installs the missing ones
# as root, otherwise prints the apt-get line to run and fails.
deps:
	bash scripts/testdeps.sh

# As root everything can run here, so the SSH end-to-end tests (e2e/doc.go)
# and the MPICH and Open MPI tests fail instead of skipping; not as root they skip.
ifeq ($(shell id -u),0)
TEST_REQUIRE := GORUN_REQUIRE_TESTNET=1 GORUN_REQUIRE_MPICH=1 GORUN_REQUIRE_OPENMPI=1
TEST_DEBIAN13 := bash scripts/rootfs.sh test trixie
endif

# The whole suite, SSH end-to-end tests included (they need root; see e2e/doc.go),
# then, as root, the MPI and PyTorch tests again in a Debian 13 root
# (test-debian13). The collective package alone takes about 6 minutes under
# -race here; the timeout leaves room for a slower machine.
test: deps
	$(TEST_REQUIRE) $(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(TEST_DEBIAN13)

# What users of Debian 13 have (Open MPI 5, MPICH 4.2, mpi4py 4, PyTorch 2.6):
# the MPI tests on test hosts (e2e -run MPI), then the packages that exercise
# them (pmix, pmi, cmd/gorun, python), run inside a
# root made with debootstrap from Debian's packages, kept in
# /srv/gorun-rootfs/trixie between runs; a missing piece fails. Needs root.
test-debian13:
	bash scripts/rootfs.sh test trixie

# The edit-test loop: unit and in-process tests only (no processes, no SSH).
test-short:
	$(GO) test -short -count=1 $(PKGS)

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	@! git grep -nE '\.\./shar[e]d' -- . || { echo "check: the tracked files above refer to the repository's sibling folder (shared, one level up), which clones do not have"; exit 1; }
	$(GO) vet $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)
	cp go.mod /tmp/gorun.go.mod.bak && cp go.sum /tmp/gorun.go.sum.bak && $(GO) mod tidy && \
	  { diff -q go.mod /tmp/gorun.go.mod.bak && diff -q go.sum /tmp/gorun.go.sum.bak || { echo "go mod tidy changed go.mod/go.sum"; exit 1; }; }

# A count, not a duration: duration budgets hit a Go fuzzing bug at the
# deadline (golang/go#75804, spurious "context deadline exceeded", fixed in Go 1.27).
FUZZTIME ?= 500000x
fuzz:
	GO=$(GO) bash scripts/fuzz.sh $(FUZZTIME)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20x ./ring ./collective ./ps

integ:
	GORUN_REQUIRE_TESTNET=1 $(GO) test -race -count=1 -v ./e2e

# Build gorun and run a small job on this machine.
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/hello ./examples/hello
	bin/gorun -np 4 bin/hello
	bin/gorun -np 4 --strategy hub bin/hello

clean:
	rm -rf bin dist python/gorun/libgorun.so python/gorun/libgorun.h python/gorun/_torchc-*.so
