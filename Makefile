# Every target is self-sufficient on a fresh clone: it installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install sysdeps tools test test-fast test-lowest lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP) sysdeps tools

# Test tools from the npm registry: Azurite (Azure Storage emulator) for the az:// tests.
AZURITE := tools/azurite/node_modules/.bin/azurite-blob
tools: $(AZURITE)
$(AZURITE): tools/azurite/package.json
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	cd tools/azurite && npm install --no-audit --no-fund --loglevel=error
	touch $(AZURITE)

# System tools the tests and the demo use: OpenSSH server/client and rsync (a baseline
# in the benchmarks), Chromium (renders the HTML report in a test), faketime (the
# lifecycle tests run again a year ahead) and Slurm with munge (the slurm provider's
# tests start a real cluster on loopback). Installed with apt-get when missing (CI runs as root).
SYSDEPS := sshd:openssh-server ssh:openssh-client ssh-keygen:openssh-client rsync:rsync \
	chromium:chromium faketime:faketime slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client \
	munged:munge mungekey:munge
sysdeps:
	@missing=""; \
	for t in $(SYSDEPS); do \
	  bin=$${t%%:*}; pkg=$${t##*:}; \
	  command -v $$bin >/dev/null 2>&1 || [ -x /usr/sbin/$$bin ] || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check cloudgpu providers tests bench tools
	$(VENV)/bin/ruff format --check cloudgpu providers tests bench tools
	$(VENV)/bin/mypy
	$(VENV)/bin/zizmor --offline --no-progress templates/github/action.yml templates/github/workflows/*.yml

test: install lint
	$(VENV)/bin/pytest -q
	$(MAKE) test-lowest

# The lowest versions pyproject.toml allows (constraints-lowest.txt), in a venv of their
# own, through the tests that send each cloud SDK's requests and read its answers.
LOW_VENV  := .venv-lowest
LOW_TESTS := tests/providers/test_aws.py tests/providers/test_aws_refresh.py \
	tests/providers/test_aws_faults.py tests/providers/test_aws_network.py tests/providers/test_gcp.py \
	tests/providers/test_gcp_refresh.py tests/providers/test_azure.py \
	tests/providers/test_azure_offers.py tests/providers/test_azure_units.py \
	tests/providers/test_azure_auth.py tests/providers/test_azure_models.py \
	tests/providers/test_azure_placement.py::test_nodes_share_one_group_network_and_placement_group \
	tests/providers/test_azure_placement.py::test_a_lost_node_is_replaced_inside_the_live_group \
	tests/providers/test_azure_placement.py::test_the_fake_refuses_what_arm_refuses_of_placement \
	tests/data/test_pull_stores.py \
	tests/providers/test_kaggle.py tests/providers/test_kubernetes.py
test-lowest: sysdeps tools
	test -x $(LOW_VENV)/bin/python || $(PYTHON) -m venv $(LOW_VENV)
	$(LOW_VENV)/bin/python -m pip install -q --upgrade pip
	$(LOW_VENV)/bin/python -m pip install -q -e '.[all,dev]' -c constraints-lowest.txt
	$(LOW_VENV)/bin/pytest -q -p no:cacheprovider $(LOW_TESTS)

test-fast: install
	$(VENV)/bin/pytest -q -m 'not slow'

demo: install
	CLOUDGPU_HOME=$(CURDIR)/.cloudgpu-demo $(VENV)/bin/cloudgpu launch templates/quickstart.yaml --yes

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(LOW_VENV) .cloudgpu-demo .pytest_cache .mypy_cache .ruff_cache
