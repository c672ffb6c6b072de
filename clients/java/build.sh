#!/bin/sh
# clients/java/build.sh [jar|test|bench|example|clean] [ARGS...] - the Java
# client built and tested with the JDK's own tools (javac, jar, java) and
# Debian's JUnit 5 console launcher; no Maven (pom.xml is for users).
#
#   jar      (the default) compiles src/main into build/java/classes and
#            makes build/java/lockbroker-0.1.0.jar
#   test     the jar, then compiles src/test into build/java/test-classes
#            and runs every test with the console launcher; ARGS go to the
#            launcher (e.g. --select-class dev.lockbroker.LockTest); exits
#            non-zero when a test failed. Tests that need a broker read
#            LOCKBROKER_URL & co. (run under tests/clients/with-broker.sh)
#            and are skipped without it.
#   bench    the jar, then bench/Bench.java; ARGS go to it (--runs 5 ...)
#   example  the jar, then examples/java/Counter.java; ARGS go to it
#   clean    removes build/java
#
# Output goes to $LB_JAVA_BUILD (default: the repository's build/java). The
# launcher is $JUNIT_CONSOLE_JAR (default Debian junit5's
# /usr/share/java/junit-platform-console-standalone.jar). JUnit runs test
# classes two at a time ($LB_JAVA_TEST_JOBS).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${LB_JAVA_BUILD:-$top/build/java}
version=0.1.0
jarfile=$out/lockbroker-$version.jar
junit=${JUNIT_CONSOLE_JAR:-/usr/share/java/junit-platform-console-standalone.jar}
# One JIT tier and the serial collector: the tests and tools are short and
# share two cores with the broker and Redis.
jvm="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"
javac_flags="--release 17 -encoding UTF-8 -Xlint:all -Xlint:-serial -Werror -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1"

die() { echo "build.sh: $*" >&2; exit 2; }
command -v javac >/dev/null 2>&1 || die "javac is missing (apt-get install openjdk-17-jdk-headless)"

build_jar() {
	rm -rf "$out/classes"
	mkdir -p "$out/classes"
	# shellcheck disable=SC2046
	javac $javac_flags -d "$out/classes" $(find "$here/src/main/java" -name '*.java' | sort)
	printf 'Automatic-Module-Name: dev.lockbroker\nImplementation-Title: lockbroker Java client\nImplementation-Version: %s\n' \
		"$version" >"$out/MANIFEST.MF"
	(cd "$out/classes" && jar --create --file "$jarfile" --manifest "$out/MANIFEST.MF" .)
	echo "build.sh: $jarfile"
}

build_tests() {
	[ -f "$junit" ] || die "$junit is missing (apt-get install junit5)"
	rm -rf "$out/test-classes"
	mkdir -p "$out/test-classes"
	# shellcheck disable=SC2046
	javac $javac_flags -Xlint:-try -cp "$out/classes:$junit" -d "$out/test-classes" \
		$(find "$here/src/test/java" -name '*.java' | sort)
	cp "$here/src/test/resources/junit-platform.properties" "$out/test-classes/"
}

cmd=${1:-jar}
[ $# -gt 0 ] && shift
case $cmd in
jar)
	build_jar
	;;
test)
	build_jar
	build_tests
	# shellcheck disable=SC2086
	exec java $jvm -Dlockbroker.protocol="$top/protocol/PROTOCOL.md" \
		-Djunit.jupiter.execution.parallel.config.fixed.parallelism="${LB_JAVA_TEST_JOBS:-2}" \
		-jar "$junit" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
		--class-path "$out/test-classes:$out/classes" \
		$( [ $# -gt 0 ] || echo --scan-class-path "$out/test-classes" ) "$@"
	;;
bench)
	build_jar
	rm -rf "$out/bench"
	mkdir -p "$out/bench"
	# shellcheck disable=SC2086
	javac $javac_flags -Xlint:-try -cp "$jarfile" -d "$out/bench" "$here/bench/Bench.java"
	exec java -cp "$out/bench:$jarfile" Bench "$@"
	;;
example)
	build_jar
	rm -rf "$out/examples"
	mkdir -p "$out/examples"
	# shellcheck disable=SC2086
	javac $javac_flags -cp "$jarfile" -d "$out/examples" "$top/examples/java/Counter.java"
	# shellcheck disable=SC2086
	exec java $jvm -cp "$out/examples:$jarfile" Counter "$@"
	;;
clean)
	rm -rf "$out"
	;;
*)
	die "unknown command $cmd (jar, test, bench, example, clean)"
	;;
esac
