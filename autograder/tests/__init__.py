import os


def must_run_in_ci(part: str) -> bool:
    """Whether a missing `part` ("browser", "postgresql") fails the run instead of skipping it: in
    CI (CI=true) it does, unless COURSE_MAY_SKIP names the part, as the GitHub workflow does on
    runners without Debian's packages (macOS)."""
    in_ci = os.environ.get("CI", "").lower() == "true"
    return in_ci and part not in os.environ.get("COURSE_MAY_SKIP", "").split()
