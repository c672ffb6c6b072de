# lockbroker build. `make run` and `make test` are the two commands a newcomer
# needs; both install missing Debian packages first (deploy/install-deps.sh).
#
# Outputs: build/lockbrokerd (release) and, for tests, a sanitizer build under
# build/san/ (AddressSanitizer + UndefinedBehaviorSanitizer, no recovery).

PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(PREFIX)/bin
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC      ?= cc
PKGS    := libuv hiredis jansson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CRIT_CFLAGS := $(shell pkg-config --cflags criterion 2>/dev/null)
CRIT_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null)

WARN    := -Wall -Wextra -Wstrict-prototypes -Wwrite-strings -Werror
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -I. -Ibuild/gen $(PKG_CFLAGS)
REL_CFLAGS  := $(BASE_CFLAGS) -O2 -g
SAN_FLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_CFLAGS  := $(BASE_CFLAGS) -O1 -g $(SAN_FLAGS)

LIB_SRCS  := $(wildcard protocol/*.c) $(wildcard broker/*.c) $(wildcard broker/*/*.c)
LUA_PRELUDE := lua/lib/prelude.lua
LUA_SRCS  := $(sort $(wildcard lua/*.lua))
GEN_SRC   := build/gen/lua_scripts.c
UI_FILES  := $(sort $(wildcard ui/*.html ui/*.css ui/*.js ui/*.svg))
UI_GEN    := build/gen/ui_assets.c
LOCKCTL_SRCS := $(wildcard cmd/lockctl/*.c)
UNIT_SRCS := $(wildcard tests/unit/*.c)
INTEG_SRCS := $(wildcard tests/integration/*.c)
HA_SRCS    := $(wildcard tests/ha/*.c)
CLUSTER_SRCS := $(wildcard tests/cluster/*.c)
REDLOCK_SRCS := $(wildcard tests/redlock/*.c)

REL_OBJS := $(patsubst %.c,build/rel/%.o,$(LIB_SRCS)) build/rel/gen/lua_scripts.o build/rel/gen/ui_assets.o
SAN_OBJS := $(patsubst %.c,build/san/%.o,$(LIB_SRCS)) build/san/gen/lua_scripts.o build/san/gen/ui_assets.o

.PHONY: all deps run test test-clients test-ui unit integration ha cluster redlock clean install bench bench-ha bench-cluster bench-redlock bench-clients bench-peers bench-tools fuzz fuzz-protocol deps-check test-packaging
# lockctl, the command-line client, is built once its sources exist.
LOCKCTL_BIN := $(if $(LOCKCTL_SRCS),build/lockctl)
LOCKCTL_SAN := $(if $(LOCKCTL_SRCS),build/san/lockctl)
all: build/lockbrokerd $(LOCKCTL_BIN)

deps:
	@sh deploy/install-deps.sh

# ---- generated: Lua scripts embedded as C arrays --------------------------
$(GEN_SRC): $(LUA_PRELUDE) $(LUA_SRCS) deploy/embed-lua.sh
	@mkdir -p build/gen
	sh deploy/embed-lua.sh $@ $(LUA_PRELUDE) $(LUA_SRCS)

# ---- generated: the /ui page's files (ui/) embedded as C arrays ------------
$(UI_GEN): $(UI_FILES) deploy/embed-ui.sh
	@mkdir -p build/gen
	sh deploy/embed-ui.sh $@ $(UI_FILES)

# ---- objects ---------------------------------------------------------------
build/rel/gen/lua_scripts.o: $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -c $< -o $@
build/san/gen/lua_scripts.o: $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -c $< -o $@
build/rel/gen/ui_assets.o: $(UI_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -c $< -o $@
build/san/gen/ui_assets.o: $(UI_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -c $< -o $@
build/rel/%.o: %.c | $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -c $< -o $@
build/san/%.o: %.c | $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -c $< -o $@
# Test sources: full ASan but for globals. Criterion finds its tests by
# walking a linker section of descriptors; redzones around instrumented
# globals made its runner read across them now and then. The broker,
# lockctl and liblb keep every check.
build/san/tests/%.o: tests/%.c | $(GEN_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) --param asan-globals=0 $(CRIT_CFLAGS) -c $< -o $@

build/rel/liblb.a: $(REL_OBJS)
	rm -f $@ && ar rcs $@ $^
build/san/liblb.a: $(SAN_OBJS)
	rm -f $@ && ar rcs $@ $^

# ---- binaries --------------------------------------------------------------
build/lockbrokerd: build/rel/cmd/lockbrokerd/main.o build/rel/liblb.a
	$(CC) -o $@ $^ $(PKG_LIBS) -lm
build/san/lockbrokerd: build/san/cmd/lockbrokerd/main.o build/san/liblb.a
	$(CC) $(SAN_FLAGS) -o $@ $^ $(PKG_LIBS) -lm
# lockctl talks to the broker through the C client (clients/c, issue 19).
build/lockctl: $(patsubst %.c,build/rel/%.o,$(LOCKCTL_SRCS)) build/rel/liblb.a build/clients/c/liblbclient.a
	$(CC) -o $@ $^ $(PKG_LIBS) -lm -pthread
build/san/lockctl: $(patsubst %.c,build/san/%.o,$(LOCKCTL_SRCS)) build/san/liblb.a build/clients/c/san/liblbclient.a
	$(CC) $(SAN_FLAGS) -o $@ $^ $(PKG_LIBS) -lm -pthread
build/san/unit_tests: $(patsubst %.c,build/san/%.o,$(UNIT_SRCS)) build/san/liblb.a
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CRIT_LIBS) $(PKG_LIBS) -lm
build/san/integration_tests: $(patsubst %.c,build/san/%.o,$(INTEG_SRCS)) build/san/liblb.a
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CRIT_LIBS) $(PKG_LIBS) -lm
# Redis Sentinel tests (issue 16; tests/ha/ha.h): one Sentinel set for the
# whole binary, with the integration harness for brokers and clients. Its
# tests kill masters, so they run one at a time (--jobs 1).
build/san/ha_tests: $(patsubst %.c,build/san/%.o,$(HA_SRCS)) build/san/tests/integration/harness.o \
                    build/san/tests/integration/mclient.o build/san/tests/common/rnode.o build/san/tests/common/rproc.o build/san/tests/common/kept.o \
                    build/san/liblb.a | build/san/lockbrokerd
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CRIT_LIBS) $(PKG_LIBS) -lm
# Redis Cluster tests (issue 17; tests/cluster/cl.h): one 3-master cluster
# for the whole binary, its nodes owned by the HA tests' keeper process,
# with the integration harness for brokers and clients. Its tests kill
# masters and move slots, so they run one at a time (--jobs 1).
build/san/cluster_tests: $(patsubst %.c,build/san/%.o,$(CLUSTER_SRCS)) \
                         build/san/tests/integration/harness.o build/san/tests/ha/keeper.o \
                         build/san/tests/integration/mclient.o build/san/tests/integration/workload.o \
                         build/san/tests/common/rnode.o build/san/tests/common/rproc.o build/san/tests/common/kept.o \
                         build/san/liblb.a | build/san/lockbrokerd
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CRIT_LIBS) $(PKG_LIBS) -lm
# Redlock tests (issue 18; tests/redlock/rl.h): each test starts its own
# independent masters and brokers with the integration harness. Its tests
# stop and restart masters and measure wake-up times, so they run one at
# a time (--jobs 1).
build/san/redlock_tests: $(patsubst %.c,build/san/%.o,$(REDLOCK_SRCS)) \
                         build/san/tests/integration/harness.o build/san/tests/integration/mclient.o \
                         build/san/tests/integration/workload.o \
                         build/san/liblb.a | build/san/lockbrokerd
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CRIT_LIBS) $(PKG_LIBS) -lm

# ---- the two commands -----------------------------------------------------
run: deps
	@$(MAKE) --no-print-directory build/lockbrokerd $(LOCKCTL_BIN)
	@sh deploy/run-dev.sh

# ASAN_OPTIONS: leaks are errors. Criterion forks workers; each is checked.
TEST_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
            LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            LB_BROKER_BIN=$(CURDIR)/build/san/lockbrokerd \
            LB_LOCKCTL_BIN=$(CURDIR)/build/san/lockctl
# broker/'s layers and no include cycle (tests/deps_check.sh), after a
# self-test that the check catches each kind of break.
deps-check:
	@sh tests/deps_check_selftest.sh
	@sh tests/deps_check.sh

test: deps deps-check
	@$(MAKE) --no-print-directory build/san/lockbrokerd $(LOCKCTL_SAN) build/san/unit_tests build/san/integration_tests build/san/ha_tests build/san/cluster_tests build/san/redlock_tests
	$(TEST_ENV) build/san/unit_tests --jobs 2
	@# The suites side by side (tests/run-together.sh says why); each of
	@# ha, cluster and redlock still runs its own tests one at a time.
	$(TEST_ENV) sh tests/run-together.sh \
	    integration 'build/san/integration_tests --jobs 2' \
	    ha 'build/san/ha_tests --jobs 1' \
	    cluster+redlock 'build/san/cluster_tests --jobs 1 && build/san/redlock_tests --jobs 1'
	@CLIENTS=1 sh deploy/install-deps.sh
	$(TEST_ENV) sh tests/clients/run-all.sh
	@PACKAGING=1 sh deploy/install-deps.sh
	@$(MAKE) --no-print-directory build/lockbrokerd $(LOCKCTL_BIN)
	$(TEST_ENV) sh tests/packaging/run-all.sh
	@UI=1 sh deploy/install-deps.sh
	$(TEST_ENV) sh tests/ui/run.sh

# Packages as users install them (tests/packaging/run-all.sh).
test-packaging: build/san/lockbrokerd build/lockbrokerd $(LOCKCTL_BIN)
	@CLIENTS=1 PACKAGING=1 sh deploy/install-deps.sh
	$(TEST_ENV) sh tests/packaging/run-all.sh

unit: build/san/unit_tests
	$(TEST_ENV) build/san/unit_tests
integration: build/san/lockbrokerd build/san/integration_tests
	$(TEST_ENV) build/san/integration_tests
ha: build/san/lockbrokerd build/san/ha_tests
	$(TEST_ENV) build/san/ha_tests --jobs 1
cluster: build/san/lockbrokerd build/san/cluster_tests
	$(TEST_ENV) build/san/cluster_tests --jobs 1
redlock: build/san/lockbrokerd build/san/redlock_tests
	$(TEST_ENV) build/san/redlock_tests --jobs 1
# The /ui page in a real browser (tests/ui/README.md): Debian's chromium,
# headless, driven by puppeteer-core from the npm registry (installed into
# build/ui-node/), against a private redis-server and the sanitizer broker.
test-ui: build/san/lockbrokerd
	@UI=1 sh deploy/install-deps.sh
	$(TEST_ENV) sh tests/ui/run.sh

# Client libraries (issue 19; clients/*/README.md): each one's own tests
# against a private redis-server and brokers (tests/clients/).
test-clients: build/san/lockbrokerd
	@CLIENTS=1 sh deploy/install-deps.sh
	$(TEST_ENV) sh tests/clients/run-all.sh

# The C client library (issue 19; clients/c/README.md): libc, POSIX sockets
# and pthreads only, its own flags (no jansson, hiredis or libuv). The
# sanitizer build is the one its tests (Criterion) link; tests/clients/
# run-all.sh builds them, the counter example and runs them.
LBC_LIB_SRCS  := $(filter-out clients/c/bench.c,$(wildcard clients/c/*.c))
LBC_TEST_SRCS := $(wildcard clients/c/tests/*.c)
LBC_CFLAGS    := -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -Iclients/c -pthread
.PHONY: clients-c
clients-c: build/clients/c/liblbclient.a build/clients/c/san/liblbclient.a build/clients/c/tests \
           build/clients/c/counter build/clients/c/bench
build/clients/c/rel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(LBC_CFLAGS) -O2 -g -c $< -o $@
build/clients/c/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(LBC_CFLAGS) -O1 -g $(SAN_FLAGS) -c $< -o $@
# As tests/: no ASan redzones around globals in Criterion test sources.
build/clients/c/san/clients/c/tests/%.o: clients/c/tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LBC_CFLAGS) -O1 -g $(SAN_FLAGS) --param asan-globals=0 $(CRIT_CFLAGS) -c $< -o $@
build/clients/c/liblbclient.a: $(patsubst %.c,build/clients/c/rel/%.o,$(LBC_LIB_SRCS))
	rm -f $@ && ar rcs $@ $^
build/clients/c/san/liblbclient.a: $(patsubst %.c,build/clients/c/san/%.o,$(LBC_LIB_SRCS))
	rm -f $@ && ar rcs $@ $^
build/clients/c/tests: $(patsubst %.c,build/clients/c/san/%.o,$(LBC_TEST_SRCS)) build/clients/c/san/liblbclient.a
	$(CC) $(SAN_FLAGS) -pthread -o $@ $^ $(CRIT_LIBS)
# The shared library: position-independent objects, the soname
# liblbclient.so.$(LBC_SOVERSION), exporting lbclient.h's functions only
# (clients/c/lbclient.map).
LBC_VERSION   := $(shell sed -n 's/^\#define LBC_VERSION "\(.*\)"/\1/p' clients/c/lbclient.h)
LBC_SOVERSION := 0
LBC_SO        := build/clients/c/liblbclient.so.$(LBC_VERSION)
build/clients/c/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(LBC_CFLAGS) -O2 -g -fPIC -c $< -o $@
$(LBC_SO): $(patsubst %.c,build/clients/c/pic/%.o,$(LBC_LIB_SRCS)) clients/c/lbclient.map
	$(CC) -shared -pthread -Wl,-soname,liblbclient.so.$(LBC_SOVERSION) \
	    -Wl,--version-script=clients/c/lbclient.map -Wl,-z,defs -o $@ \
	    $(patsubst %.c,build/clients/c/pic/%.o,$(LBC_LIB_SRCS))
build/clients/c/lbclient.pc: clients/c/lbclient.pc.in clients/c/lbclient.h Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(LBC_VERSION)|' $< > $@
.PHONY: build/clients/c/lbclient.pc
build/clients/c/counter: build/clients/c/rel/examples/c/counter.o build/clients/c/liblbclient.a
	$(CC) -pthread -o $@ $^
build/clients/c/bench: build/clients/c/rel/clients/c/bench.o build/clients/c/liblbclient.a
	$(CC) -pthread -o $@ $^

# The C client (issue 28): liblbclient.so (soname .so.0, and the .so link
# to build against), liblbclient.a, lbclient.h and lbclient.pc, so that
# `pkg-config --cflags --libs lbclient` is all a program needs.
.PHONY: install-lbclient
install-lbclient: $(LBC_SO) build/clients/c/liblbclient.a build/clients/c/lbclient.pc
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(LBC_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf liblbclient.so.$(LBC_VERSION) $(DESTDIR)$(LIBDIR)/liblbclient.so.$(LBC_SOVERSION)
	ln -sf liblbclient.so.$(LBC_SOVERSION) $(DESTDIR)$(LIBDIR)/liblbclient.so
	install -m 0644 build/clients/c/liblbclient.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 clients/c/lbclient.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 0644 build/clients/c/lbclient.pc $(DESTDIR)$(PKGCONFIGDIR)/

# Binaries, the systemd unit (paths filled in), its user, an example
# config that never overwrites an existing one, and the C client.
install: build/lockbrokerd $(LOCKCTL_BIN) install-lbclient
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	           $(DESTDIR)$(SYSCONFDIR)/lockbroker
	install -m 0755 build/lockbrokerd $(LOCKCTL_BIN) $(DESTDIR)$(BINDIR)/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    deploy/lockbroker.service.in > $(DESTDIR)$(UNITDIR)/lockbroker.service
	install -m 0644 deploy/lockbroker.sysusers $(DESTDIR)$(SYSUSERSDIR)/lockbroker.conf
	test -e $(DESTDIR)$(SYSCONFDIR)/lockbroker/lockbroker.json || \
	    install -m 0644 deploy/lockbroker.json $(DESTDIR)$(SYSCONFDIR)/lockbroker/lockbroker.json

# The Debian package (deploy/deb/build.sh): build/deb/lockbroker_VERSION_ARCH.deb
# from the release binaries, with dpkg's tools. test-deb builds one in a
# temporary directory and checks it (tests/packaging/deb.sh; make test runs
# it through tests/packaging/run-all.sh).
.PHONY: deb test-deb
deb: build/lockbrokerd $(LOCKCTL_BIN)
	sh deploy/deb/build.sh build/deb
test-deb: build/lockbrokerd $(LOCKCTL_BIN)
	@PACKAGING=1 sh deploy/install-deps.sh
	sh tests/packaging/deb.sh

# Benchmarks (issue 6; tests/bench/README.md), never part of `make test`.
# Knobs: BENCH_SECONDS (per scenario, default 5), BENCH_QUICK=1 (smoke run).
# bench-ha: only the Sentinel part (tests/bench/ha.sh), which bench runs last.
bench: bench-tools
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/run.sh
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/ha.sh
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/cluster.sh
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/redlock.sh

# The five client libraries' benches side by side, in rounds, on one
# release broker (tests/bench/clients.sh; tests/bench/README.md).
bench-clients: build/lockbrokerd
	@CLIENTS=1 sh deploy/install-deps.sh
	LB_BROKER_BIN=$(CURDIR)/build/lockbrokerd sh tests/clients/with-broker.sh sh tests/bench/clients.sh
# lockbroker against dflockd side by side (tests/bench/peers.sh; dflockd
# built from a snapshot, see there). PEERS_STORE: single, redlock, cluster.
PEERS_STORE ?= single
bench-peers: bench-tools
	BENCH_SECONDS="$(BENCH_SECONDS)" sh tests/bench/peers.sh $(PEERS_STORE)
bench-redlock: bench-tools
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/redlock.sh

bench-cluster: bench-tools
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/cluster.sh

bench-ha: bench-tools
	BENCH_SECONDS="$(BENCH_SECONDS)" BENCH_QUICK="$(BENCH_QUICK)" sh tests/bench/ha.sh

# Fault runs (issue 26; tests/bench/README.md, "faultrun"), never part of
# `make test`: one store (FAULTRUN_STORE: single, sentinel, cluster or
# redlock) under faults (FAULTRUN_FAULTS: all or no-data-loss) for
# FAULTRUN_SECONDS with two brokers (FAULTRUN_BROKER, default the release
# build) and a workload; prints what its clients saw, per minute.
# FAULTRUN_ARGS passes more options (--json FILE, --out DIR, --seed N).
FAULTRUN_STORE   ?= single
FAULTRUN_FAULTS  ?= all
FAULTRUN_SECONDS ?= 60
FAULTRUN_BROKER  ?= build/lockbrokerd
.PHONY: faultrun
faultrun:
	@$(MAKE) --no-print-directory build/lockbrokerd
	python3 tests/bench/faultrun $(FAULTRUN_STORE) --faults $(FAULTRUN_FAULTS) \
	    --seconds $(FAULTRUN_SECONDS) --broker $(FAULTRUN_BROKER) $(FAULTRUN_ARGS)

bench-tools: deps
	@$(MAKE) --no-print-directory build/lockbrokerd
	$(CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 $$(pkg-config --cflags libuv jansson hiredis) \
		-o build/lbbench tests/bench/lbbench.c $$(pkg-config --libs libuv jansson hiredis) -lm

# Random multi-broker calls of the Lua scripts with the data model's
# invariants checked after each (tests/fuzz); run after changing lua/.
FUZZ_SEEDS ?= 20
FUZZ_STEPS ?= 2500
fuzz: deps
	sh tests/fuzz/run.sh $(FUZZ_SEEDS) $(FUZZ_STEPS)

# libFuzzer targets for the protocol layer and the daemon's parsers (issue
# 14; tests/fuzz/README.md), built with clang under ASan+UBSan into
# build/fuzz/; never part of `make test`, which needs no clang. Knob:
# FUZZ_SECONDS, the run time of each target (default 45, five targets).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 45
FUZZ_TARGETS := frame req url config cluster
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -I. $(PKG_CFLAGS) -O1 -g \
                $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_LIB_OBJS := $(patsubst %.c,build/fuzz/%.o,$(wildcard protocol/*.c) broker/base/url.c broker/base/log.c broker/config.c broker/config_reload.c \
                  broker/store/cluster_map.c broker/store/slot.c)
FUZZ_BINS    := $(patsubst %,build/fuzz/fuzz_%,$(FUZZ_TARGETS))
# Kept: make would delete these as intermediates and rebuild them each time.
.SECONDARY: $(patsubst %,build/fuzz/tests/fuzz/fuzz_%.o,$(FUZZ_TARGETS))

build/fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
build/fuzz/liblb.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^
build/fuzz/fuzz_%: build/fuzz/tests/fuzz/fuzz_%.o build/fuzz/liblb.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lm
# The config loader may open no file but the target's own: its calls of
# open/fopen go to the target's sandbox_* (tests/fuzz/fuzz_config.c).
build/fuzz/config_sandboxed.o: build/fuzz/broker/config.o
	objcopy $(foreach f,open open64 fopen fopen64,--redefine-sym $(f)=sandbox_$(f)) $< $@
build/fuzz/fuzz_config: build/fuzz/tests/fuzz/fuzz_config.o build/fuzz/config_sandboxed.o build/fuzz/liblb.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lm

fuzz-protocol:
	@FUZZ=1 sh deploy/install-deps.sh
	@$(MAKE) --no-print-directory $(FUZZ_BINS)
	sh tests/fuzz/run_protocol.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf build

-include $(shell find build -name '*.d' -type f 2>/dev/null)
