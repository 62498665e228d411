# One entry point for everything: `make test` is what CI runs, `make sandbox` runs the
# whole system locally, `make bench` prints performance figures.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)
# promtool evaluates the chart's alerting rules in the tests (tests/chart/test_alert_rules.py).
PROMTOOL := $(BIN)/promtool

.PHONY: test sandbox bench bench-full fuzz fuzz-atheris lint lock tools promtool clean

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"'
	@$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || { \
	  echo "python venv support is missing: installing Debian's python3-venv"; \
	  apt-get update -qq && apt-get install -y -qq python3-venv; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev,plot]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# Debian's prometheus package ships promtool, a static binary: fetch the package and
# copy that one file, so nothing is installed system-wide and no daemon is started.
# `apt-get update` runs only when the package lists do not know the package yet.
promtool: $(PROMTOOL)

$(PROMTOOL):
	@mkdir -p $(@D)
	@tmp=$$(mktemp -d) && cd $$tmp && \
	  { apt-get download -qq prometheus 2>/dev/null || \
	    { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb root && \
	  install -m 0755 root/usr/bin/promtool $(abspath $@); \
	  status=$$?; rm -rf $$tmp; exit $$status
	@$@ --version | head -1

# The docs' walkthroughs (run by the tests, tests/docs) pipe into jq and call curl:
# Debian's packages, installed when missing.
tools:
	@command -v jq >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 || { \
	  echo "installing Debian's jq and curl (the docs' walkthroughs use them)"; \
	  { apt-get install -y -qq jq curl >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq jq curl; }; }; }
	@command -v kubectl >/dev/null 2>&1 || { \
	  echo "kubectl is required by the end-to-end tests and the sandbox quick start."; \
	  echo "Install kubectl 1.28 or newer (the Kubernetes project's kubectl package or static binary),"; \
	  echo "so that 'kubectl version --client' works, then run make again."; exit 1; }

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

test: $(STAMP) tools lint $(PROMTOOL)
	PROMTOOL=$(abspath $(PROMTOOL)) $(BIN)/pytest -n 2 --dist loadfile --max-worker-restart=0

sandbox: $(STAMP) tools
	$(BIN)/python -m sandbox up $(SANDBOX_ARGS)

# Short runs of every benchmark (a few minutes); bench-full: the long intervals and the
# larger sizes (docs/developer/performance.md). Figures are printed and written to .bench/*.json.
bench: $(STAMP)
	$(BIN)/python -m bench

bench-full: $(STAMP)
	$(BIN)/python -m bench --full

# 8 fuzz targets x 13,000 examples = 104,000 inputs from outside (make test runs 60 each).
fuzz: $(STAMP)
	FUZZ_EXAMPLES=13000 $(BIN)/pytest tests/fuzz -q -p no:cacheprovider

# Coverage-guided (atheris, the optional `fuzz` extra) over the AdmissionReview parser.
fuzz-atheris: $(STAMP)
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev,plot,fuzz]'
	ATHERIS_RUNS=$${ATHERIS_RUNS:-100000} $(BIN)/python -m tests.fuzz.atheris_review

lock:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^gpu-reservation' > requirements.lock.new
	{ head -2 requirements.lock; cat requirements.lock.new; } > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock; rm -f requirements.lock.new

clean:
	rm -rf $(VENV) .sandbox .bench .pytest_cache .mypy_cache .ruff_cache
