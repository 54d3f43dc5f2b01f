# Two commands a new user needs: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test fast lint typecheck unit bench bytecode clean host-tools

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# The package's bytecode, written once: it is installed editable (pip compiles only what it
# copies into the venv), and where PYTHONDONTWRITEBYTECODE is set (this machine image sets
# it) every process would compile it again at start-up: each of the suite's hundreds of node
# processes spent 0.12 s of its 0.65 s start there. Up-to-date files are skipped.
PACKAGES := node operators protocol state ops_scripts
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 $(PACKAGES) tests > /dev/null

demo: $(STAMP) bytecode
	$(VENV)/bin/dpc demo

# The type check runs beside the suite, not before it: the suite leaves about a third of
# 2 cores idle while its real processes wait on the wall clock, and mypy of a fresh clone
# takes half a minute of one. Its report is printed, and its verdict counts, at the end.
TYPES_OUT := .typecheck.out
# Real hosts (tests/integration/test_netns.py, test_ssh_hosts.py): nftables cuts the links
# between network namespaces, sshd serves --hosts ssh. Installed where we are root and
# they are missing (CI's fresh Debian); where they cannot be, those tests skip and the
# summary says why.
host-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null && \
	   { ! command -v nft > /dev/null || [ ! -x /usr/sbin/sshd ]; }; then \
	  echo "installing nftables and openssh-server (kernel partitions, --hosts ssh tests)"; \
	  ( apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      nftables openssh-server ) > .host-tools.log 2>&1 \
	  || echo "could not install them (.host-tools.log): their tests will skip"; \
	fi

test: $(STAMP) lint bytecode host-tools
	@( $(VENV)/bin/mypy > $(TYPES_OUT) 2>&1; echo $$? > $(TYPES_OUT).rc ) & \
	$(MAKE) --no-print-directory unit; suite=$$?; wait; \
	echo "mypy: $$(tail -1 $(TYPES_OUT))"; types=$$(cat $(TYPES_OUT).rc); \
	if [ "$$types" != 0 ]; then cat $(TYPES_OUT); fi; \
	[ "$$suite" = 0 ] && [ "$$types" = 0 ]

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The suite on every core (pytest-xdist), its runs kept in $(SUITE_RUNS); then the test that
# reconciles every run the suite checked, over them (no worker sees the others' runs:
# tests/ops_scripts/reconcile/test_agreement.py).
JOBS       ?= auto
SUITE_RUNS := .pytest-runs
# worksteal: a worker that runs out of tests takes pending ones from the other, so that a
# few long real-process tests at the end do not leave a core idle.
XDIST      := -n $(JOBS) --dist worksteal
unit: $(STAMP) bytecode
	$(VENV)/bin/pytest $(XDIST) --basetemp=$(SUITE_RUNS)
	DPC_SUITE_RUNS=$(SUITE_RUNS) $(VENV)/bin/pytest tests/ops_scripts/reconcile/test_agreement.py

# The suite without the real-process tests of tests/integration/ and Spark's (marked slow:
# tests/conftest.py): a quick loop while developing. `make test` runs everything.
fast: $(STAMP) bytecode
	$(VENV)/bin/pytest $(XDIST) -m 'not slow'

bench: $(STAMP) bytecode
	$(VENV)/bin/dpc bench core

clean:
	rm -rf $(VENV) $(SUITE_RUNS) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(TYPES_OUT) $(TYPES_OUT).rc
