"""bench/gil_profile.py: what `bench_vs_burrow.py --gil-profile` prints is py-spy's GIL samples summed, per area."""

import subprocess
import sys
import textwrap
import time

from tests.repository.test_bench_smoke import bench

gil_profile = bench("gil_profile")

PUBLISH = "publish_commits (lagwatch/services/ingest/history_publisher.py:98)"
RAW = f"""\
main (cli.py:50);_pass (lagwatch/services/ingest/processor.py:166) 600
main (cli.py:50);{PUBLISH};_produce (lagwatch/services/ingest/history_publisher.py:158) 30
_worker (thread.py:83);close (lagwatch/shared/records/history.py:160) 10

not a sample line
"""


def test_samples_are_summed_into_seconds_held_and_the_history_share():
    s = gil_profile.summarize(RAW, rate=200)
    assert s.held_s == 3.2  # 640 samples at 200/s
    assert s.area_s == 0.2  # the two stacks through the history's files
    assert s.top == [("_produce", 0.15), ("close", 0.05)]  # the innermost history frame of each
    assert "in the history's code 0.20 s (6.2 %)" in gil_profile.format_summary(s)


def test_a_running_process_is_sampled_and_its_area_found(tmp_path):
    # a process whose only work holds the GIL in a file named as the history publisher is
    (tmp_path / "history_publisher.py").write_text(
        textwrap.dedent(
            """
            import time
            def spin(until):
                while time.monotonic() < until:
                    sum(range(1000))
            """
        )
    )
    code = "import time, history_publisher; history_publisher.spin(time.monotonic() + 30)"
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    try:
        time.sleep(0.5)  # imported and spinning
        profile = gil_profile.GilProfile(process.pid, tmp_path / "gil.txt")
        assert profile.start(), "py-spy is a dev dependency"
        time.sleep(2)
        s = profile.stop()
    finally:
        process.kill()
        process.wait()
    assert s is not None and s.held_s > 0.5
    assert s.area_s > 0.8 * s.held_s and s.top[0][0] == "spin"
