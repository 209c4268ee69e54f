# Sourced by the start.sh of each test-only Java launcher (tests/minidfs, tests/miniyarn): builds
# the launcher's Maven project when its build is missing or older than its sources, and serializes
# builds, since cargo and pytest may start clusters at once. The sourcing script sets:
#   here    its project folder (pom.xml, src/)
#   marker  a class file the build produces
# and calls `launcher_build force` (for --build-only) or `launcher_build_if_needed`, then runs
#   java -cp "$(launcher_classpath)" <main class> ...
classes="$here/target/classes"
classpath_file="$here/target/classpath.txt"
# Written after each successful build. Maven leaves unchanged outputs alone
# (a resource edit does not recompile the class), so compare against this.
stamp="$here/target/.build-stamp"

launcher_needs_build() {
  [[ -f "$stamp" && -f "$classpath_file" && -f "$marker" ]] || return 0
  [[ -n "$(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit)" ]] && return 0
  # A cleaned ~/.m2 leaves a stale classpath behind; rebuilding re-fetches it.
  local jar jars
  IFS=: read -r -a jars <"$classpath_file"
  for jar in "${jars[@]}"; do
    [[ -f "$jar" ]] || return 0
  done
  return 1
}

launcher_build() {
  command -v mvn >/dev/null || {
    echo "start.sh: mvn not found; install Maven 3 and a JDK 17" >&2
    exit 1
  }
  mkdir -p "$here/target"
  if command -v flock >/dev/null; then
    exec 9>"$here/target/.build-lock"
    flock 9
  fi
  if [[ "${1:-}" == force ]] || launcher_needs_build; then
    # Maven's own output goes to stderr: stdout is reserved for the ready line.
    # jansi.noreset stops Maven 3.8's quiet mode from printing bare ANSI resets.
    MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" \
      mvn -q -B -Dstyle.color=never -f "$here/pom.xml" package -DskipTests 1>&2
    touch "$stamp"
  fi
  if command -v flock >/dev/null; then
    exec 9>&-
  fi
}

launcher_build_if_needed() {
  if launcher_needs_build; then
    launcher_build check
  fi
}

launcher_classpath() {
  echo "$classes:$(cat "$classpath_file")"
}
