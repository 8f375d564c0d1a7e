"""Command line of the autograder.

    python -m autograder submit NOTEBOOK [--json] [--timeout S]   grade one notebook
    python -m autograder grade-all SUBMISSIONS [--out DIR] [--jobs N] [--db URL]   grade a class
    python -m autograder release [STEM ...] [--check]             make or check course/
    python -m autograder sync [STEM ...] [--check] [--no-execute] solutions/*.py -> .ipynb
    python -m autograder timing [STEM ...] [--json]               headless run and submits, side by side
    python -m autograder properties [NN ...]                      what each exercise's grading observes (GRADING.md)
    python -m autograder mutants [NN ...] [--exercise X] [--limit N]   tests of the tests: mutants of the model answers

Exit codes: 0 when grading ran (whatever the score), 1 when nbgrader failed, 2 for bad input.
"""
import argparse
import json
import sys
import time

from autograder.notebooks import ROOT, BadInput
from autograder.workspace import GradingError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", help="grade one notebook and print a score per exercise")
    p.add_argument("notebook")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--timeout", type=int, help="seconds per cell (default: nbgrader_config.py)")
    p.add_argument("--feedback-dir", help="where to write the HTML feedback (default: feedback/)")
    p.add_argument("--workspace", help="keep nbgrader's workspace (autograded copy, gradebook) in this new folder")
    p = sub.add_parser("grade-all", help="grade every learner's notebooks into a gradebook and grades.csv")
    p.add_argument("submissions")
    p.add_argument("--out", default=str(ROOT / "grading"))
    p.add_argument("--timeout", type=int, help="seconds per cell (default: nbgrader_config.py)")
    p.add_argument("--jobs", type=int, help="notebooks graded at once (default: the number of cores)")
    p.add_argument("--db", help="gradebook URL, e.g. postgresql+psycopg://user@host/db (default: OUT/gradebook.db)")
    p.add_argument("--job-timeout", type=int, default=900, help="seconds after which one notebook's grading is killed")
    p.add_argument("--memory-mb", type=int, help="MiB of memory for each grading kernel (default: nbgrader_config.py; 0: none)")
    p = sub.add_parser("mutants", help="mutate each model answer: grading must kill every mutant the oracle family sees")
    p.add_argument("stems", nargs="*", help="notebooks, e.g. 04 (default: all)")
    p.add_argument("--exercise", help="only this exercise")
    p.add_argument("--limit", type=int, help="at most this many mutants per exercise, spread over its cell")
    p = sub.add_parser("release", help="regenerate course/ from solutions/")
    p.add_argument("stems", nargs="*", help="only these notebooks, e.g. 07_kv_cache (default: all)")
    p.add_argument("--check", action="store_true", help="only check that course/ is up to date")
    p = sub.add_parser("sync", help="write solutions/*.ipynb from their text sources solutions/*.py and execute them")
    p.add_argument("stems", nargs="*", help="notebooks to sync, e.g. 07_kv_cache (default: every one out of sync)")
    p.add_argument("--check", action="store_true", help="only check that every pair is in sync")
    p.add_argument("--no-execute", action="store_true", help="do not execute (stored outputs may go stale)")
    p = sub.add_parser("timing", help="time each notebook's headless run and its submits (solution, stub) in one run")
    p.add_argument("stems", nargs="*", help="only these notebooks, e.g. 07_kv_cache (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as one JSON object (the table goes to stderr)")
    p = sub.add_parser("properties", help="per exercise, what its grading observes in general (GRADING.md)")
    p.add_argument("stems", nargs="*", help="only these notebooks, e.g. 04 or 07_kv_cache (default: all)")
    args = parser.parse_args(argv)

    try:
        if args.command == "submit":
            from autograder.prestart import prestart_kernel
            prestart_kernel()  # first: it boots and imports torch while grading imports the rest
            from autograder.submit import format_table, grade
            start = time.perf_counter()
            report = grade(args.notebook, timeout=args.timeout, feedback_dir=args.feedback_dir,
                           workspace=args.workspace)
            if args.json:
                print(json.dumps(report, ensure_ascii=False))
            else:
                print(format_table(report))
                print(f"graded in {time.perf_counter() - start:.1f} s")
        elif args.command == "grade-all":
            from autograder.batch import grade_all
            csv_path = grade_all(args.submissions, args.out, jobs=args.jobs, db_url=args.db, timeout=args.timeout,
                                 job_timeout=args.job_timeout, memory_mb=args.memory_mb)
            print(f"grades: {csv_path}")
        elif args.command == "release":
            from autograder import release
            if args.check:
                stale = release.check()
                if stale:
                    print("course/ is out of date with solutions/ (run `make release`): " + ", ".join(stale),
                          file=sys.stderr)
                    return 1
                print("course/ is up to date with solutions/")
            else:
                for path in release.release(only=args.stems):
                    print(f"released {path.relative_to(ROOT)}")
        elif args.command == "mutants":
            from autograder import mutants
            return mutants.main(args.stems, exercise=args.exercise, limit=args.limit)
        elif args.command == "properties":
            from autograder import properties
            return properties.main(args.stems)
        elif args.command == "timing":
            from autograder import timing
            return timing.main(args.stems, as_json=args.json)
        elif args.command == "sync":
            from autograder import sources
            stale = sources.out_of_sync()
            if args.check:
                for stem, why in stale.items():
                    print(f"solutions/{stem}: {why}", file=sys.stderr)
                if stale:
                    print("run `make sync` to rebuild these notebooks from their .py sources", file=sys.stderr)
                    return 1
                print("every solutions/*.ipynb matches its .py source")
            else:
                if sources.write_rules(sources.GRADING, None):
                    print("rewrote GRADING.md's course-wide rules")
                for stem in args.stems or [s for s in stale if s != "GRADING.md"]:
                    print(f"synced {sources.sync(stem, execute=not args.no_execute).relative_to(ROOT)}")
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except GradingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
