#!/usr/bin/env bash
# Mutation testing of the pure core and the verdict, with the fast unit tests only (not in CI: minutes, not seconds).
#
#   tools/mutation.sh                      # all five modules
#   tools/mutation.sh perf_callbacks/core/stats.py      # only some of them
#
# Runs mutmut 3.x (pip install "mutmut>=3.8,<4") in a scratch copy of the repository ($MUTATION_DIR, default
# /tmp/perf-callbacks-mutation), so the worktree gets no mutants/ folder and no mutmut config. For each mutant
# mutmut runs only the tests that call the mutated function. Prints per-file "killed/total" and every survivor
# (`mutmut show <name>` inside $MUTATION_DIR shows its diff). Survivors are triaged in docs/contributing.md, "Mutation testing".
# Env: PYTHON (default: python on PATH), MUTATION_DIR, MUTATION_JOBS (default 2), MUTATION_TESTS.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python}
case "$PYTHON" in */*) PYTHON=$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON") ;; esac  # survives the cd below
MUTMUT=("$PYTHON" -m mutmut)
WORK=${MUTATION_DIR:-/tmp/perf-callbacks-mutation}
JOBS=${MUTATION_JOBS:-2}

MODULES=(perf_callbacks/core/schedule.py perf_callbacks/core/traces.py perf_callbacks/core/stats.py
         perf_callbacks/core/clock.py perf_callbacks/analysis/verdict.py)
[ $# -gt 0 ] && MODULES=("$@")
# The fast tests that exercise these modules (found with grep; each runs in well under a second), plus doctests.
# MUTATION_TESTS (space-separated) replaces the list, e.g. to measure what older tests killed.
read -r -a TESTS <<< "${MUTATION_TESTS:-tests/core/test_schedule.py tests/core/test_traces.py tests/core/test_stats.py \
tests/core/test_clock.py tests/analysis/test_verdict.py}"

"$PYTHON" -c "import mutmut, pytest, torch" 2>/dev/null \
  || { echo "needs mutmut 3, pytest and torch in $PYTHON: pip install 'mutmut>=3.8,<4'" >&2; exit 2; }
# Only ever delete a folder this script made (it leaves a marker in it).
if [ -e "$WORK" ] && [ ! -e "$WORK/.perf-callbacks-mutation" ]; then
  echo "$WORK exists and was not made by this script; set MUTATION_DIR to a new folder" >&2; exit 2
fi
rm -rf "$WORK" && mkdir -p "$WORK" && touch "$WORK/.perf-callbacks-mutation"
cp -r "$ROOT/perf_callbacks" "$ROOT/tests" "$ROOT/pyproject.toml" "$WORK/"
{
  echo "[mutmut]"
  echo "source_paths = perf_callbacks"
  echo "only_mutate ="; printf '    %s\n' "${MODULES[@]}"
  echo "pytest_add_cli_args ="; printf '    %s\n' -p no:cacheprovider --doctest-modules
  echo "pytest_add_cli_args_test_selection ="; printf '    %s\n' "${TESTS[@]}" "${MODULES[@]}"
} > "$WORK/setup.cfg"

cd "$WORK"
unset PYTHONPATH  # the mutated copy under mutants/ must be the one imported
"${MUTMUT[@]}" run --max-children "$JOBS" >mutmut-run.log 2>&1 || { tail -30 mutmut-run.log; exit 1; }
"${MUTMUT[@]}" results --all true >results.txt 2>&1 || true
"$PYTHON" - "${MODULES[@]}" <<'PY'
import re, sys
from collections import Counter
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

total, killed, survivors = Counter(), Counter(), []
for line in open("results.txt"):
    m = re.match(r"\s*(\S+): (\S.*)$", line)
    if not m:
        continue
    name, status = m.groups()
    path = next((p for p in sys.argv[1:] if name.startswith(p[:-3].replace("/", ".") + ".")), "?")
    total[path] += 1
    if status in ("killed", "timeout"):  # a mutant that hangs the tests is caught, too
        killed[path] += 1
    else:
        survivors.append((status, name))
for p in sys.argv[1:]:
    print(f"{p}: {killed[p]}/{total[p]} killed")
print(f"total: {sum(killed.values())}/{sum(total.values())} killed")
with open("survivors.diff", "w") as out:
    for status, name in survivors:
        diff = get_diff_for_mutant(name, path=find_mutant(name).path)
        out.write(f"# {name}: {status}\n{diff}\n")
        changed = [ln[1:].strip() for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("---", "+++")]
        print(f"{status:>9} {name.split('.', 2)[-1]}: {' => '.join(changed)}"[:240])
PY
echo "full diffs of the survivors: $WORK/survivors.diff"
