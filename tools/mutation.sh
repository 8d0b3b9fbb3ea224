#!/usr/bin/env bash
# Mutation testing of the pure core, the engine and its windows, the analysis' numbers and its measures, with the
# fast unit tests only (not in CI: each module takes minutes, the engine and its windows the longest).
#
#   tools/mutation.sh                      # every module below
#   tools/mutation.sh perf_callbacks/core/timing/stats.py      # only some of them (one at a time is kinder to a shared box)
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

# The measures of the analysis (collectives, copies, launch, memory, MFU, the op table, the input evidence and the
# advice), FLOP counting, the compile watch, the remote output and the CPU wait (issue 35).
MEASURES=(perf_callbacks/analysis/measures/comms.py perf_callbacks/analysis/results/headline.py perf_callbacks/analysis/measures/copies.py
          perf_callbacks/analysis/measures/launch.py perf_callbacks/analysis/memory/ops.py perf_callbacks/analysis/compute/mfu.py
          perf_callbacks/analysis/measures/op_table.py perf_callbacks/analysis/judge/evidence.py perf_callbacks/analysis/judge/advice.py
          perf_callbacks/analysis/trace/machine.py perf_callbacks/analysis/rank/measures.py
          perf_callbacks/analysis/trace/extra_events.py perf_callbacks/core/flops/step.py perf_callbacks/core/flops/count.py
          perf_callbacks/core/flops/model_facts.py
          perf_callbacks/core/flops/compile_watch.py perf_callbacks/core/files/remote.py perf_callbacks/cli/remote_read.py
          perf_callbacks/core/timing/cpu_wait.py perf_callbacks/core/timing/monitor.py)
# The modules of issue 53's audit by hand (gains, the hang report, the console line, the roofline and the precision
# hint, diff's estimate check, the growth check, the sidecar's values): see tools/mutation-survivors.md.
AUDITED=(perf_callbacks/analysis/judge/gains.py perf_callbacks/analysis/windows/hang.py
         perf_callbacks/analysis/render/console.py perf_callbacks/analysis/compute/roofline.py
         perf_callbacks/analysis/compute/precision.py perf_callbacks/analysis/diff/gains.py
         perf_callbacks/core/memory/growth.py perf_callbacks/analysis/rank/sidecar_values.py)
MODULES=(perf_callbacks/core/triggers/schedule.py perf_callbacks/core/files/traces.py perf_callbacks/core/windows/trace_cut.py
         perf_callbacks/core/timing/stats.py perf_callbacks/core/clock.py perf_callbacks/core/engine/engine.py perf_callbacks/core/engine/aside.py
         perf_callbacks/core/windows/recorder.py perf_callbacks/analysis/judge/verdict.py perf_callbacks/analysis/judge/noise.py
         perf_callbacks/analysis/judge/cluster.py perf_callbacks/analysis/trace/timeline.py perf_callbacks/analysis/trace/schema.py
         perf_callbacks/integrations/_accelerate/steps.py "${MEASURES[@]}" "${AUDITED[@]}")
[ $# -gt 0 ] && MODULES=("$@")
# The fast tests that exercise these modules (found with grep; they drive the engine by hand, no framework), plus
# doctests; tests marked slow, multiprocess or gpu are left out. Not all of tests/core: some of its files hang in
# mutmut's forked workers (the mutant then reads as a timeout). MUTATION_TESTS (space-separated) replaces the list,
# e.g. to measure what older tests killed. Of test_memory.py only the engine's test runs (the other forks).
read -r -a TESTS <<< "${MUTATION_TESTS:-tests/core/triggers/test_schedule.py tests/core/files/test_traces.py \
tests/core/windows/test_trace_cut.py tests/core/timing/test_stats.py tests/core/test_clock.py tests/core/timing/test_monitor.py \
tests/core/engine/test_engine.py tests/core/windows/test_window.py tests/core/engine/test_phases.py \
tests/core/windows/test_summary_console.py \
tests/core/memory/test_memory.py::test_a_memory_reading_that_raises_turns_the_metrics_off_with_one_warning \
tests/analysis/judge/test_verdict.py tests/analysis/judge/test_noise.py \
tests/analysis/judge/test_cluster.py tests/analysis/judge/test_stragglers.py tests/analysis/trace/test_timeline.py \
tests/analysis/trace/test_units.py tests/analysis/trace/test_idle.py tests/analysis/trace/test_set_aside.py}"
# The adapters' step counting is exercised by the in-process Accelerate tests (a real Accelerator on CPU, seconds per
# mutant); they join the list only when an adapter module is mutated (every mutant of the engine would run them too).
if [ -z "${MUTATION_TESTS:-}" ] && [[ " ${MODULES[*]}" == *" perf_callbacks/integrations/"* ]]; then
  TESTS+=(tests/integrations/test_accelerate.py tests/integrations/test_accelerate_loops.py
          tests/integrations/test_accelerate_steps.py tests/integrations/test_accelerate_intervals.py
          tests/integrations/test_accelerate_faults.py)
fi

# The measures have tests of their own (written traces, fed records, a real S3 server on loopback, which needs moto;
# tests/core/flops/test_compile_watch.py and test_flops.py drive a real engine); they join the list only when one of the
# measures' modules is mutated. Not yet run under mutmut: whether any of them hangs in its forked workers is unknown.
for m in "${MODULES[@]}"; do
  if [ -z "${MUTATION_TESTS:-}" ] && [[ " ${MEASURES[*]} " == *" $m "* ]]; then
    TESTS+=(tests/analysis/measures/test_comms.py tests/analysis/measures/test_comms_written.py tests/analysis/results/test_headline.py tests/analysis/measures/test_copies.py tests/analysis/measures/test_copies_advice.py
            tests/analysis/measures/test_launch.py tests/analysis/measures/test_launch_written.py tests/analysis/memory/test_memory_ops.py tests/analysis/compute/test_mfu.py
            tests/analysis/measures/test_op_table.py tests/analysis/judge/test_evidence.py tests/analysis/judge/test_advice.py
            tests/analysis/trace/test_machine.py tests/analysis/measures/test_measures.py tests/analysis/measures/test_measures_views.py
            tests/analysis/results/test_scalars.py tests/core/flops/test_flops.py tests/core/flops/test_flop_count.py
            tests/core/flops/test_compile_watch.py tests/core/files/test_remote.py tests/core/timing/test_cpu_wait.py
            tests/test_cli_report_remote.py)
    break
  fi
done

# Issue 53's modules have their tests too (fed results, written traces and hang folders, a detector fed readings);
# they join when one of those modules is mutated. Not yet run under mutmut either.
for m in "${MODULES[@]}"; do
  if [ -z "${MUTATION_TESTS:-}" ] && [[ " ${AUDITED[*]} " == *" $m "* ]]; then
    TESTS+=(tests/analysis/judge/test_gains.py tests/analysis/windows/test_hang.py tests/analysis/render/test_console.py
            tests/analysis/compute/test_roofline.py tests/analysis/compute/test_precision.py
            tests/core/memory/test_memory_growth.py
            tests/analysis/rank/test_sidecar.py)
    break
  fi
done

"$PYTHON" -c "import mutmut, pytest, torch" 2>/dev/null \
  || { echo "needs mutmut 3, pytest and torch in $PYTHON: pip install 'mutmut>=3.8,<4'" >&2; exit 2; }
# Only ever delete a folder this script made (it leaves a marker in it).
if [ -e "$WORK" ] && [ ! -e "$WORK/.perf-callbacks-mutation" ]; then
  echo "$WORK exists and was not made by this script; set MUTATION_DIR to a new folder" >&2; exit 2
fi
rm -rf "$WORK" && mkdir -p "$WORK" && touch "$WORK/.perf-callbacks-mutation"
cp -r "$ROOT/perf_callbacks" "$ROOT/tests" "$ROOT/examples" "$ROOT/pyproject.toml" "$WORK/"  # examples: configs the adapters' tests read
# mutmut calls every function of a mutated module through its trampoline (a frame of module `mutmut...`); in the
# copy, core/warn.py skips it like a framework's frame, or the tests that check which line a warning points at fail.
sed -i 's/"contextlib", "threading",/"contextlib", "threading", "mutmut",/' "$WORK/perf_callbacks/core/warn.py"
grep -q '"mutmut"' "$WORK/perf_callbacks/core/warn.py" || { echo "core/warn.py changed: update the sed" >&2; exit 2; }
{
  echo "[mutmut]"
  echo "source_paths = perf_callbacks"
  echo "also_copy ="; echo "    examples"
  echo "only_mutate ="; printf '    %s\n' "${MODULES[@]}"
  echo "pytest_add_cli_args ="
  printf '    %s\n' -p no:cacheprovider --doctest-modules -m "not slow and not multiprocess and not gpu"
  echo "pytest_add_cli_args_test_selection ="; printf '    %s\n' "${TESTS[@]}" "${MODULES[@]}"
} > "$WORK/setup.cfg"

cd "$WORK"
unset PYTHONPATH  # the mutated copy under mutants/ must be the one imported
if ! "${MUTMUT[@]}" run --max-children "$JOBS" >mutmut-run.log 2>&1; then  # non-zero also after a complete run
  grep -q "mutations/second" mutmut-run.log || { tail -30 mutmut-run.log; exit 1; }  # it stopped before the mutants
fi
"${MUTMUT[@]}" results --all true >results.txt 2>&1 || true
"$PYTHON" - "${MODULES[@]}" <<'PY'
import re, sys
from collections import Counter
from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

total, killed, timeouts, survivors = Counter(), Counter(), Counter(), []
for line in open("results.txt"):
    m = re.match(r"\s*(\S+): (\S.*)$", line)
    if not m:
        continue
    name, status = m.groups()
    path = next((p for p in sys.argv[1:] if name.startswith(p[:-3].replace("/", ".") + ".")), "?")
    total[path] += 1
    if status in ("killed", "timeout", "segfault"):  # a mutant that hangs or crashes the tests is caught, too...
        killed[path] += 1
    if status != "killed":  # ...but listed: the test run itself may have hung in mutmut's worker
        survivors.append((status, name))
        timeouts[path] += status in ("timeout", "segfault")
for p in sys.argv[1:]:
    print(f"{p}: {killed[p]}/{total[p]} killed" + (f" ({timeouts[p]} by timeout or crash)" if timeouts[p] else ""))
print(f"total: {sum(killed.values())}/{sum(total.values())} killed")
with open("survivors.diff", "w") as out:
    for status, name in survivors:
        diff = get_diff_for_mutant(name, path=find_mutant(name).path)
        out.write(f"# {name}: {status}\n{diff}\n")
        changed = [ln[1:].strip() for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("---", "+++")]
        print(f"{status:>9} {name.split('.', 2)[-1]}: {' => '.join(changed)}"[:240])
PY
echo "full diffs of the survivors: $WORK/survivors.diff"
