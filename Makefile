# Two commands set everything up on a fresh Debian 12 (as root): `make demo`, `make test`.
# On any machine with Python 3.11+, without root: `make lint` and `make test` (the tests that
# need root, loop devices or a Debian package that is missing skip; with CI=true they fail).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.dev-installed
# The Debian packages, by what needs them. `make demo` (and bench, profile) installs only
# RUN_PACKAGES; `make test` installs TEST_PACKAGES too, `make lab` LAB_PACKAGES. Add a package
# to the group of what needs it (or a new group listed where it is needed).
RUN_PACKAGES   := fio numactl
# loop devices, mounts, swap and ext4 in the write-guard and device tests
DEVICE_PACKAGES := util-linux mount e2fsprogs
# the QEMU lab (lab/machine.py): qemu, a static busybox for the initramfs, modprobe/depmod
LAB_PACKAGES   := qemu-system-x86 busybox-static kmod
# the tools that make real on-disk signatures for the write-guard tests (mkfs.*, make-bcache,
# veritysetup, pvcreate, sfdisk/sgdisk, mksquashfs, ...); wipefs and blkid come with util-linux
GUARD_PACKAGES := fdisk gdisk xfsprogs btrfs-progs dosfstools exfatprogs ntfs-3g genisoimage \
                  cryptsetup-bin lvm2 f2fs-tools jfsutils nilfs-tools reiserfsprogs udftools \
                  erofs-utils squashfs-tools bcache-tools
# the namespace test hosts of the multi-host tests (tests/netns_hosts.py): sshd, ssh, ip, ss
HOSTS_PACKAGES := openssh-server openssh-client iproute2
# the report's browser test (tests/headless.py): headless Chromium
REPORT_PACKAGES := chromium
TEST_PACKAGES  := $(RUN_PACKAGES) $(DEVICE_PACKAGES) $(LAB_PACKAGES) $(GUARD_PACKAGES) $(HOSTS_PACKAGES) \
                  $(REPORT_PACKAGES)

# Installs, as root, whatever of the packages $(1) is missing (and the venv's prerequisites),
# in one apt-get call. A package's postinst may enable or start a service (sshd; `fio --server`,
# unauthenticated on every address; lvm2's monitor and sockets): a policy-rc.d keeps anything
# from starting during the install, and every unit or init script the install enabled is
# disabled again, so the machine runs nothing it did not run before.
define apt_install
	@missing=""; \
	command -v dpkg-query >/dev/null || { echo "not Debian: install $(1) yourself" >&2; exit 1; }; \
	for p in $(1); do \
	  dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null | grep -qx installed || missing="$$missing $$p"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root (or install:$$missing) first" >&2; exit 1; fi; \
	  enabled() { systemctl list-unit-files --state=enabled --no-legend 2>/dev/null | cut -d' ' -f1; \
	    ls /etc/rc[2-5].d 2>/dev/null | sed -n 's/^S[0-9]*//p'; }; \
	  before=$$(enabled | sort -u); \
	  policy=""; [ -e /usr/sbin/policy-rc.d ] || { policy=/usr/sbin/policy-rc.d; \
	    printf '#!/bin/sh\nexit 101\n' >$$policy; chmod 755 $$policy; }; \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  status=$$?; [ -z "$$policy" ] || rm -f $$policy; \
	  for unit in $$(enabled | sort -u | grep -vxF -e "$$before"); do case $$unit in \
	    *.service|*.socket|*.timer|*.path) systemctl disable --quiet $$unit;; *) update-rc.d $$unit disable;; esac \
	    >/dev/null 2>&1 && echo "disabled $$unit (enabled by the install, not asked for)"; done; \
	  exit $$status; \
	fi
endef

deps: ## the Debian packages a run needs (RUN_PACKAGES) and the venv's prerequisites, when missing (as root)
	$(call apt_install,$(RUN_PACKAGES))

# What `make test` needs of the machine: installed as root; as another user, or off Debian, it
# goes on without (each test that needs what is missing skips, and fails under CI=true).
test-deps:
	@if [ "$$(id -u)" = 0 ] && command -v dpkg-query >/dev/null; then $(MAKE) --no-print-directory all-deps; \
	else echo "not root (or not Debian): no Debian packages installed; tests that need a missing one skip"; fi

all-deps:
	$(call apt_install,$(TEST_PACKAGES))

lab-deps:
	$(call apt_install,$(RUN_PACKAGES) $(LAB_PACKAGES))

# The venv: iobench alone for `make demo`; its `dev` extras (pytest, ruff, mypy, ...) as well for
# what develops or measures it.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "$(PYTHON) cannot make a venv: install python3-venv (make deps, as root)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

# An editable install leaves iobench's own modules uncompiled, and with PYTHONDONTWRITEBYTECODE
# set every command would compile them again (a quarter of a second): compile them as a wheel
# install would. Stale files are harmless (Python checks the source's time and size).
venv: $(STAMP)
	@$(BIN)/python -m compileall -q iobench

dev-venv: $(DEV_STAMP) venv

# The demo's data file lives in a directory of the user's own (mode 700), never under a name
# other users share, and is removed at the end. A run holding the disk's lock is waited for
# (saying whose it is), up to DEMO_WAIT seconds.
DEMO_DIR  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/iobench-demo
DEMO_WAIT ?= 900
demo: deps venv ## a real 24-point sweep on a file of your own; prints where results and figures are
	@mkdir -p "$(DEMO_DIR)" && chmod 700 "$(DEMO_DIR)"
	@IOBENCH_DEMO_DIR="$(DEMO_DIR)" $(BIN)/iobench run configs/demo.yaml --figures --wait $(DEMO_WAIT); \
	status=$$?; if [ -e "$(DEMO_DIR)/iobench-demo.dat" ]; then rm -f "$(DEMO_DIR)/iobench-demo.dat" && \
	  echo "removed the demo's data file $(DEMO_DIR)/iobench-demo.dat"; fi; exit $$status

lint: dev-venv
	$(BIN)/ruff check iobench lab tests benchmarks
	$(BIN)/ruff format --check iobench lab tests benchmarks
	$(BIN)/mypy
	$(BIN)/vulture iobench .vulture_whitelist.py --min-confidence 60

# Two lanes. The fast lane needs no fio, root, loop device or QEMU and leaves out the few tests
# marked slow; it runs with fio off PATH, so a test that needs fio without its marker fails there.
# `make test` runs the fast lane, then everything else; each lane prints its 25 slowest tests.
SLOW_LANE := fio or root or loopdev or lab or slow

test-fast: dev-venv ## the daily lane: no fio, root, loop devices or QEMU (a few minutes)
	IOBENCH_TEST_WITHOUT=fio $(BIN)/pytest -m "not ($(SLOW_LANE))" --durations=25

test: test-deps dev-venv lint ## lint, types, the fast lane, then the rest; with CI=true a skipped test fails the run
	IOBENCH_TEST_WITHOUT=fio $(BIN)/pytest -m "not ($(SLOW_LANE))" --durations=25
	$(BIN)/pytest -m "$(SLOW_LANE)" --durations=25

lab: lab-deps dev-venv ## boot the QEMU 2-socket SMT guest, sweep NUMA/SMT/settings/guard in it: results/lab-*/
	$(BIN)/python -m lab results

bench: deps dev-venv ## iobench's overhead over plain fio, then parsing speed against fio-plot (ratios, best of 3)
	$(BIN)/python benchmarks/overhead.py --rounds 3
	$(BIN)/python benchmarks/parse_speed.py --repeat 3

profile: deps dev-venv ## where the time of a whole `iobench run` goes, phase by phase (benchmarks/profile_run.py)
	$(BIN)/python benchmarks/profile_run.py --rounds 3

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
