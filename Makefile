# Two commands set everything up on a fresh Debian 12 (as root): `make demo`, `make test`.
# On any machine with Python 3.11+, without root: `make lint` and `make test` (the tests that
# need root, loop devices or a Debian package that is missing skip; with CI=true they fail).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Every Debian package `make test` needs, by what needs it. Add to a group (or a new group
# listed in APT_PACKAGES); `make deps` installs whatever of it is missing in one apt-get call.
RUN_PACKAGES   := fio numactl
# loop devices, mounts, swap and ext4 in the write-guard and device tests
DEVICE_PACKAGES := util-linux mount e2fsprogs
# the QEMU lab (lab/machine.py): qemu, a static busybox for the initramfs, modprobe/depmod
LAB_PACKAGES   := qemu-system-x86 busybox-static kmod
# the tools that make real on-disk signatures for the write-guard tests (mkfs.*, make-bcache,
# veritysetup, pvcreate, sfdisk/sgdisk, mksquashfs, ...); wipefs and blkid come with util-linux
GUARD_PACKAGES := fdisk gdisk xfsprogs btrfs-progs dosfstools exfatprogs ntfs-3g genisoimage \
                  cryptsetup-bin lvm2 f2fs-tools jfsutils nilfs-tools reiserfsprogs udftools \
                  erofs-utils squashfs-tools bcache-tools chromium
# the namespace test hosts of the multi-host tests (tests/netns_hosts.py): sshd, ssh, ip, ss
HOSTS_PACKAGES := openssh-server openssh-client iproute2
APT_PACKAGES   := $(RUN_PACKAGES) $(DEVICE_PACKAGES) $(LAB_PACKAGES) $(GUARD_PACKAGES) $(HOSTS_PACKAGES)
# package:service pairs whose postinst would start a network service (sshd; fio's `fio --server`,
# unauthenticated on every address): a policy-rc.d keeps them from starting during the install
# and, when `make deps` installed the package, the service is left disabled.
SERVICES_OFF   := openssh-server:ssh fio:fio

.PHONY: demo test lint deps test-deps venv bench profile lab clean

deps: ## the Debian packages in APT_PACKAGES and the venv's prerequisites, when missing (as root)
	@missing=""; \
	command -v dpkg-query >/dev/null || { echo "not Debian: install $(APT_PACKAGES) yourself" >&2; exit 1; }; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null | grep -qx installed || missing="$$missing $$p"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root (or install:$$missing) first" >&2; exit 1; fi; \
	  policy=""; [ -e /usr/sbin/policy-rc.d ] || { policy=/usr/sbin/policy-rc.d; \
	    printf '#!/bin/sh\nexit 101\n' >$$policy; chmod 755 $$policy; }; \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  status=$$?; [ -z "$$policy" ] || rm -f $$policy; \
	  for svc in $(SERVICES_OFF); do case " $$missing " in *" $${svc%%:*} "*) \
	    for unit in $${svc#*:}.service $${svc#*:}.socket; do systemctl disable --now $$unit >/dev/null 2>&1; done; \
	    update-rc.d $${svc#*:} disable >/dev/null 2>&1;; esac; done; \
	  exit $$status; \
	fi

# What `make test` needs of the machine: installed as root (`make deps`); as another user, or off
# Debian, it goes on without (each test that needs what is missing skips, and fails under CI=true).
test-deps:
	@if [ "$$(id -u)" = 0 ] && command -v dpkg-query >/dev/null; then $(MAKE) --no-print-directory deps; \
	else echo "not root (or not Debian): no Debian packages installed; tests that need a missing one skip"; fi

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "$(PYTHON) cannot make a venv: install python3-venv (make deps, as root)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# An editable install leaves iobench's own modules uncompiled, and with PYTHONDONTWRITEBYTECODE
# set every command would compile them again (a quarter of a second): compile them as a wheel
# install would. Stale files are harmless (Python checks the source's time and size).
venv: $(STAMP)
	@$(BIN)/python -m compileall -q iobench

demo: deps venv ## a real 24-point sweep on a temp file; prints where results and figures are
	$(BIN)/iobench run configs/demo.yaml --figures

lint: venv
	$(BIN)/ruff check iobench lab tests benchmarks
	$(BIN)/ruff format --check iobench lab tests benchmarks
	$(BIN)/mypy

test: test-deps venv lint ## lint, types, then the tests; with CI=true in the environment a skipped test fails the run
	$(BIN)/pytest

lab: deps venv ## boot the QEMU 2-socket SMT guest, sweep NUMA/SMT/settings/guard in it: results/lab-*/
	$(BIN)/python -m lab results

bench: deps venv ## iobench's overhead over plain fio, then parsing speed against fio-plot (ratios, best of 3)
	$(BIN)/python benchmarks/overhead.py --rounds 3
	$(BIN)/python benchmarks/parse_speed.py --repeat 3

profile: deps venv ## where the time of a whole `iobench run` goes, phase by phase (benchmarks/profile_run.py)
	$(BIN)/python benchmarks/profile_run.py --rounds 3

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
