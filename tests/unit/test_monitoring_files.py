"""docs/monitoring/: in the sdist, and naming only metrics and labels the daemon has.

The files' behaviour is held by a real Prometheus in the heavy suite (tests/integration/
test_prometheus_monitoring.py: promtool, a scraped storm); here, what needs no Prometheus: the build
backend puts them in the source distribution, and every ``session_supervisor_*`` name they use is an
instrument of supervisor/telemetry/attributes.py as Prometheus spells it (dots to underscores,
``_total`` on a counter) or one of its labels.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from supervisor.telemetry import attributes as A

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"
# the names scripts and operators rely on (README: "What scripts can rely on")
FILES = ("README.md", "alerts.yml", "alerts-test.yml", "dashboard.json")
_NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)


def test_the_sdist_carries_docs_monitoring(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCES)
    # the build backend pyproject.toml names, as `python -m build --sdist` calls it (without its isolation)
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))",
            str(tmp_path / "dist"),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    name = built.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / "dist" / name) as sdist:
        members = {Path(m).relative_to(Path(m).parts[0]).as_posix() for m in sdist.getnames() if "/" in m}
    assert {f"docs/monitoring/{f}" for f in FILES} <= members
    assert "supervisor/telemetry/prometheus.py" in members


def _instrument_names() -> set[str]:
    names = set()
    for key, value in vars(A).items():
        # attribute and metric names (a dotted name; the schema URL is not one)
        if not isinstance(value, str) or "." not in value or "://" in value:
            continue
        prometheus = value.replace(".", "_")
        names.add(prometheus)
        if key.startswith("M_"):
            names.add(f"{prometheus}_total")  # a counter's
    # a gauge whose unit is a rate gets it as a suffix ({attempt}/s)
    names.add(f"{A.M_PACING_RATE.replace('.', '_')}_per_second")
    return names


def test_the_monitoring_files_name_only_the_daemons_metrics_and_labels() -> None:
    known = _instrument_names()
    used: dict[str, set[str]] = {}
    for file in FILES:
        for name in re.findall(r"\bsession_supervisor_\w+", (MONITORING / file).read_text()):
            used.setdefault(name, set()).add(file)
    assert used, "no metric named at all"
    assert {name: files for name, files in used.items() if name not in known} == {}


def test_the_dashboard_has_one_query_per_panel_on_the_datasource_variable() -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    titles = [panel["title"] for panel in dashboard["panels"]]
    assert len(titles) == len(set(titles))
    for panel in dashboard["panels"]:
        (target,) = panel["targets"]
        assert target["expr"].strip(), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
