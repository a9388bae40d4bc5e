"""Audit the installed Python packages for known vulnerabilities with pip-audit and print a summary.

Prints how many packages were actually checked: pip-audit needs PyPI's JSON advisory API, and where only a
package mirror is reachable (as on our CI) it can check none, which must not read as "no vulnerabilities".
Exit code 0 always (a report, not a gate); `--strict` exits 1 when a vulnerability is found.

    python3 -m pip install "pip-audit>=2.7,<3" && python3 scripts/audit_deps.py
"""
from __future__ import annotations

import json
import subprocess
import sys


def main(argv: list[str]) -> int:
    try:
        run = subprocess.run([sys.executable, "-m", "pip_audit", "-l", "-f", "json", "--progress-spinner", "off"],
                             capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"audit: pip-audit did not run ({type(err).__name__}); nothing was checked.")
        return 0
    try:
        deps = json.loads(run.stdout or "{}").get("dependencies", [])
    except json.JSONDecodeError:
        print(f"audit: pip-audit gave no report (exit {run.returncode}): {run.stderr.strip()[-300:]}")
        return 0
    checked = [d for d in deps if "skip_reason" not in d]
    vulnerable = [d for d in checked if d.get("vulns")]
    print(f"audit: {len(checked)} of {len(deps)} installed packages checked against PyPI advisories; "
          f"{len(deps) - len(checked)} could not be checked (no advisory data reachable for them).")
    for d in vulnerable:
        ids = ", ".join(v.get("id", "?") for v in d["vulns"])
        print(f"audit: {d['name']} {d['version']}: {ids}")
    if not vulnerable:
        print("audit: no known vulnerability among the checked packages.")
    return 1 if (vulnerable and "--strict" in argv) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
