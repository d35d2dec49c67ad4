"""Run mutmut over one module of pmtk, confined to that module's own test files.

Usage (from the repository root)::

    uv run --group dev python tools/mutation.py throttle
    uv run --group dev python tools/mutation.py paging --tests tests/client/test_paging.py
    uv run --group dev python tools/mutation.py rules --only 'toolkit.rules.x_check*'
    uv run --group dev python tools/mutation.py throttle --show   # diffs of the survivors

mutmut reads its settings from ``pyproject.toml`` in the directory it runs in and
writes a ``mutants/`` copy of the sources there. To keep one module's run from
disturbing another's (and the work tree), each module gets its own scratch
directory ``.mutation/<module>/`` (git-ignored) holding a copy of the sources and
tests and a ``pyproject.toml`` whose ``[tool.mutmut]`` names only that module and
its test files. mutmut caches verdicts there. It re-runs every mutant a name or
glob selects, killed or not, so a rerun of a module scored on a selection, whose
mutated files are unchanged since the last run, names only the mutants not killed
then; after a change to those files every selected mutant runs again.
``--fresh`` starts from scratch.

The script prints the score (killed / all mutants) and writes the surviving
mutants' names to ``.mutation/<module>/survivors.txt``; ``docs/testing.md``
records the scores and why each remaining survivor is equivalent.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / ".mutation"


@dataclass(frozen=True)
class Target:
    """One module under mutation and the tests allowed to kill its mutants."""

    source: str
    """The file mutated (several: comma-separated)."""
    tests: tuple[str, ...]
    only: tuple[str, ...] = ()
    """Mutant name globs scored (empty: every mutant of the module)."""
    isolation: str = "fork"
    """mutmut's ``process_isolation``: "forkserver" where the tests run Polars, whose
    thread pool does not survive a fork from a process that already used it (the
    mutants then hang and count as timeouts)."""
    deselect: tuple[str, ...] = ()
    """Test ids of those files left out: tests that run the mutated code in a child
    Python of a scratch copy, where mutmut's trampoline finds no configuration and the
    import fails (and a child's calls are not in mutmut's map of tests, so they would
    kill nothing)."""


TARGETS: dict[str, Target] = {
    "throttle": Target(
        "toolkit/throttle.py",
        ("tests/client/test_throttle.py", "tests/client/test_config_and_pacing.py"),
    ),
    # paging.py and page.py, every function (920 mutants): the walk's guards, its
    # recovery (retries, repeated or looping links, totals that lie, short pages), the
    # summary text and dedupe.
    "paging": Target(
        "toolkit/paging.py,toolkit/page.py",
        ("tests/client/test_paging.py", "tests/client/test_paging_recovery.py"),
    ),
    # The conform step (conform.py: the forms, odd values to `invalid`, unknown keys to
    # `extra`, the extension table's rows) and the forms registry (forms.py: the readers
    # it applies, the classifiers, schemas and mock converters): every function of both.
    "conform": Target(
        "toolkit/views/conform.py,toolkit/catalogue/forms.py",
        (
            "tests/frames/test_conform.py",
            "tests/frames/test_conform_bites.py",
            "tests/catalogue/test_forms.py",
            "tests/catalogue/test_forms_bites.py",
            "tests/frames/test_fhir_forms.py",
        ),
        isolation="forkserver",
        deselect=(
            "tests/catalogue/test_forms.py::test_a_form_declared_on_a_scratch_field_is_followed_everywhere",
            "tests/catalogue/test_forms.py::test_without_the_declaration_every_consumer_refuses_the_other_form",
        ),
    ),
    # The store's transaction (transaction.py: staging, dedupe, validation, merge, commit,
    # verify) and checksums.py, every function of both, against their focused files.
    "commit": Target(
        "toolkit/store/transaction.py,toolkit/store/checksums.py",
        ("tests/store/test_commit_verify.py", "tests/store/test_commit_bites.py"),
        isolation="forkserver",
    ),
    # rules.py: the checks of one value and one resource; not the extension walk
    # (tests/frames) or the generated rule-source table (being reworked, issue 26).
    "rules": Target(
        "toolkit/rules.py,toolkit/catalogue/forms.py",
        ("tests/rules/test_rules.py", "tests/rules/test_rule_guards.py"),
        (
            # the classifiers of the live alternates live in the forms registry
            "toolkit.catalogue.forms.x__number_or_quantity__mutmut_*",
            "toolkit.catalogue.forms.x__string_or_reference__mutmut_*",
            *(
                f"toolkit.rules.{name}__mutmut_*"
                for name in (
                    "x_format_problem",
                    "x_reference_problem",
                    "x_id_problem",
                    "x__type_ok",
                    "x_reference_form",
                    "xǁ_Walkǁfield",
                    "xǁ_Walkǁsingle",
                    "xǁ_Walkǁenum",
                    "xǁ_Walkǁreference",
                    "xǁ_Walkǁunknown_keys",
                    "x_check_resource",
                    "x_check_value",
                )
            ),
        ),
    ),
    # The ViewDefinition runner, every function, against its focused tests: the official
    # suite's cases (not the report, paging and hostile-resource tests of that file) and the
    # runner's own files. test_runner.py (the inputs a view takes, the regex engine) and
    # test_property_oracle.py (~30 s, a randomised per-record comparison) are left out: on
    # a 2-core machine each mutant's run must stay at seconds.
    "viewdefs": Target(
        "toolkit/viewdefs/runner.py",
        (
            "tests/viewdefs/test_runner_bites.py",
            "tests/viewdefs/test_for_each_or_null.py",
            "tests/viewdefs/test_sof_suite.py::test_suite_case",
        ),
        isolation="forkserver",
    ),
    # The FHIRPath compiler under the runner, every function, against its own file, the
    # runner's tests and test_runner.py's regex and replacement tests.
    "viewdefs-compile": Target(
        "toolkit/viewdefs/compile.py",
        (
            "tests/viewdefs/test_compile_bites.py",
            "tests/viewdefs/test_runner_bites.py",
            "tests/viewdefs/test_for_each_or_null.py",
            "tests/viewdefs/test_runner.py",
            "tests/viewdefs/test_sof_suite.py::test_suite_case",
        ),
        isolation="forkserver",
    ),
    # The receiver's journal, every function, and the row insert it shares with the
    # migration (in queue.py, below both): its own focused files (in-process, no
    # `pmtk listen` child), not the end-to-end listener tests that also reach it. The
    # migration test reads the store with Polars: under a plain fork every mutant that
    # reached it hung and counted as a timeout.
    "journal": Target(
        "toolkit/webhooks/journal.py,toolkit/webhooks/queue.py",
        ("tests/listen/test_journal_bites.py", "tests/listen/test_journal_migration.py"),
        (
            "toolkit.webhooks.journal.*",
            "toolkit.webhooks.queue.x_insert_changes__mutmut_*",
            "toolkit.webhooks.queue.x_redacted__mutmut_*",
        ),
        "forkserver",
    ),
    # The one precedence rule, in the store and the lake: every function of both modules.
    # The end-to-end syncs of tests/store/test_precedence_paths.py are left out (slow).
    "precedence": Target(
        "toolkit/store/precedence.py,toolkit/lake/precedence.py",
        (
            "tests/store/test_precedence.py",
            "tests/lake/test_precedence.py",
            "tests/store/test_precedence_bites.py",
        ),
        isolation="forkserver",
    ),
    # The store's merge of single changes (apply_changes, drop_missing, record_catch_up):
    # every function; its own in-process tests, not the listener's end-to-end ones.
    "store-merge": Target(
        "toolkit/store/merge.py",
        (
            "tests/listen/test_store_changes.py",
            "tests/store/test_raw_changes.py",
            "tests/store/test_merge_bites.py",
        ),
        isolation="forkserver",
    ),
}
"""Module name -> the file mutated and its own test files."""

# The suite's addopts run xdist, nbmake and doctests; a mutant run wants one
# process per mutant and only the module's own tests.
_ADDOPTS = "-q --strict-markers --import-mode=importlib -p no:cacheprovider -n 0 -p no:nbmake"


def _pyproject(target: Target, tests: list[str]) -> str:
    """The scratch copy's pyproject.toml: the real one with mutmut's settings and quiet addopts."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = re.sub(r'(?m)^addopts = ".*"$', f'addopts = "{_ADDOPTS}"', text)
    text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", text)
    settings = {
        "source_paths": ["toolkit/"],
        "only_mutate": target.source.split(","),
        # docs/: the suite's tests compare the report they write with docs/sof-test-report.json
        "also_copy": ["contracts/", "conftest.py", "docs/"],
        "pytest_add_cli_args_test_selection": [
            *tests,
            *(arg for test in target.deselect for arg in ("--deselect", test)),
        ],
        "pytest_add_cli_args": ["-p", "no:randomly"],
        "use_git_change_detection": False,
        "process_isolation": target.isolation,
    }
    lines = ["", "[tool.mutmut]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    return text + "\n".join(lines) + "\n"


def _prepare(work: Path, target: Target, tests: list[str], fresh: bool) -> None:
    """Copy sources and tests into ``work`` (keeping mutmut's cache unless ``fresh``)."""
    # A store built by the code of an earlier run is not a fixture of this one.
    shutil.rmtree(work / "store-cache", ignore_errors=True)
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("toolkit", "contracts", "tests", "docs"):
        dest = work / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(
            ROOT / name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "benchmarks")
        )
    shutil.copy2(ROOT / "conftest.py", work / "conftest.py")
    (work / "pyproject.toml").write_text(_pyproject(target, tests), encoding="utf-8")
    _forget_survivors(work)


def _forget_survivors(work: Path) -> None:
    """Clear the cached verdict of every mutant not killed, so new tests get their chance.

    mutmut keeps a verdict until the mutated function changes; a survivor would
    otherwise stay a survivor after a test that kills it was written.
    """
    for meta in (work / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text(encoding="utf-8"))
        codes = data.get("exit_code_by_key", {})
        for key, code in codes.items():
            if code != _KILLED:
                codes[key] = None
        meta.write_text(json.dumps(data), encoding="utf-8")


_KILLED = 1
"""mutmut's exit code for a mutant whose tests failed."""


def _sources_digest(target: Target) -> str:
    """The sha256 of the mutated files: mutmut's cached mutants hold only while it is unchanged."""
    digest = hashlib.sha256()
    for name in target.source.split(","):
        digest.update(name.encode())
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def _not_killed(work: Path, target: Target, only: list[str]) -> list[str] | None:
    """The selected mutants the last run did not kill, or ``None`` when all must run.

    ``None`` when there was no run yet or the mutated files changed since (the
    cached mutant names would not be this code's).
    """
    stamp = work / "sources.sha256"
    if not stamp.is_file() or stamp.read_text(encoding="utf-8") != _sources_digest(target):
        return None
    names = []
    for meta in (work / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text(encoding="utf-8"))
        for key, code in data.get("exit_code_by_key", {}).items():
            selected = not only or any(fnmatch.fnmatchcase(key, pat) for pat in only)
            if selected and code != _KILLED:
                names.append(key)
    return sorted(names)


def _verdicts(work: Path, only: list[str]) -> dict[str, str]:
    """Each mutant's status from ``mutmut results``, limited to the ``only`` globs if any."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    )
    out = {}
    for line in done.stdout.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name and (not only or any(fnmatch.fnmatchcase(name, pat) for pat in only)):
            out[name] = status
    return out


_DEAD = {"killed", "timeout"}
"""Verdicts that count as killed (a timeout is a mutant the tests caught hanging)."""


def main(argv: list[str] | None = None) -> int:
    """Run mutmut for one module; print its score and survivors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", choices=sorted(TARGETS))
    parser.add_argument("--tests", nargs="+", help="test files instead of the module's own")
    parser.add_argument("--only", nargs="+", default=[], help="mutant name globs to (re)run")
    parser.add_argument("--fresh", action="store_true", help="forget earlier verdicts")
    parser.add_argument("--score-only", action="store_true", help="report the last run's verdicts")
    parser.add_argument("--show", action="store_true", help="print the survivors' diffs")
    parser.add_argument("--max-children", type=int, default=1, help="parallel mutant processes")
    args = parser.parse_args(argv)

    target = TARGETS[args.module]
    tests = list(args.tests or target.tests)
    work = SCRATCH / args.module
    if not args.score_only:
        stamp = work / "sources.sha256"
        changed = not stamp.is_file() or stamp.read_text(encoding="utf-8") != _sources_digest(
            target
        )
        _prepare(work, target, tests, args.fresh)
        if changed:
            # mutmut maps each function to the tests that reach it and only adds new tests to
            # that map: a function added since would be tried against the new tests alone.
            (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    # The store tests build one synced store per run, not one per mutant.
    store = work / "store-cache" / "pmtk-store"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PMTK_MUTATION_STORE": str(store)}
    # The SQL-on-FHIR suite's tests look for it beside the checkout, which from the
    # scratch copy is .mutation/shared: without this they are skipped, and kill nothing.
    env.setdefault("PMTK_SOF_SUITE", str(ROOT.parent / "shared" / "sql-on-fhir-v2"))
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)]
    # mutmut redraws a progress line many times a second: keep it in a log, not the terminal.
    only = list(args.only or target.only)
    names = only
    if not args.score_only and not args.only and only:
        # mutmut reruns whatever it is named; without names it keeps its verdicts itself
        pending = _not_killed(work, target, only)
        names = only if pending is None else pending
    with (work / "run.log").open("a", encoding="utf-8") as log:
        if not args.score_only and (names or not only):
            subprocess.run([*command, *names], cwd=work, env=env, check=False, stdout=log)
    if not args.score_only and not args.only:
        (work / "sources.sha256").write_text(_sources_digest(target), encoding="utf-8")

    verdicts = _verdicts(work, only)
    counts = Counter(verdicts.values())
    survivors = [
        f"{n}  [{s}]" for n, s in verdicts.items() if s not in _DEAD | {"skipped", "not checked"}
    ]
    (work / "survivors.txt").write_text("".join(f"{s}\n" for s in survivors), encoding="utf-8")
    # "not checked": a run stopped before it reached them; scored on what was checked.
    total = len(verdicts) - counts["skipped"] - counts["not checked"]
    killed = sum(counts[s] for s in _DEAD)
    score = 100.0 * killed / total if total else 0.0
    print(f"\n{args.module}: {target.source}, tests {' '.join(tests)}")
    if only:
        print(f"mutants selected: {' '.join(only)}")
    print(f"{killed} of {total} mutants killed ({score:.1f} %); {dict(counts)}")
    _print_survivors(work, survivors, show=args.show)
    return 0


def _print_survivors(work: Path, survivors: list[str], *, show: bool) -> None:
    """One line per surviving mutant, each followed by its diff with ``show``."""
    for name in survivors:
        print(f"  survived: {name}")
        if show:
            shown = subprocess.run(
                [sys.executable, "-m", "mutmut", "show", name.split()[0]],
                cwd=work,
                capture_output=True,
                text=True,
                check=False,
            )
            print(shown.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
