"""The timeline HTML renders a plotly figure in a real headless browser, offline."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mamba3_perf.reports.timeline import write_timeline

from synthetic_run import EVIL, events

CHROMIUM = "/usr/bin/chromium"


# CI sets MAMBA3_PERF_REQUIRE_BROWSER=1 after installing chromium: there a missing browser fails.
@pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("MAMBA3_PERF_REQUIRE_BROWSER"),
                    reason="chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
def test_timeline_renders_in_chromium(tmp_path):
    html = write_timeline(events(), tmp_path / "timeline.html", title="browser " + EVIL)
    profile = tmp_path / "profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           "--dump-dom", html.resolve().as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    shutil.rmtree(profile, ignore_errors=True)
    dom = res.stdout
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'class="plot-container' in dom and "js-plotly-plot" in dom
    assert 'class="trace bars"' in dom  # the bars were drawn, not just the empty frame
    assert "prod | stream 1" in dom  # a lane label rendered in the SVG
    assert EVIL not in dom
