"""The pytest sessions the tests start are forks of one process per worker (launch/forkserver.py):
each must see what a new `python -m pytest` would, end when its time is up, and give way to a new
process where a test puts a stand-in module first on PYTHONPATH."""

from __future__ import annotations

import os
import time

import pytest

from conftest import _forks


@pytest.fixture
def forked(bench):
    if _forks() is None:
        pytest.skip("sessions start as new processes here (a GPU is present, or LLMBENCH_TEST_FORKSERVER=0)")
    return bench


def test_a_forked_session_has_its_own_folder_environment_command_line_and_process_group(forked, monkeypatch):
    monkeypatch.setenv("LLMBENCH_TEST_PROBE", "given to this session")
    forked.makepyfile(
        test_where="""
        import os, sys

        def test_where():
            print("CWD", os.getcwd())
            print("PROBE", os.environ.get("LLMBENCH_TEST_PROBE"))
            print("ARGV", " ".join(sys.orig_argv[1:3]), os.path.basename(os.path.dirname(sys.argv[0])))
            print("LEADER", os.getpgid(0) == os.getpid() == os.getsid(0))
            assert False, "its exit code comes back"
        """
    )
    result = forked.runpytest_subprocess("-s", "-p", "no:cacheprovider", "test_where.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [f"*CWD {forked.path}", "PROBE given to this session", "ARGV -m pytest pytest", "LEADER True"]
    )
    # pytest imported its plugins itself, as in a new process (imported before, it would warn)
    assert "cannot be rewritten" not in result.stdout.str()


def test_a_session_past_its_timeout_is_killed(forked, tmp_path):
    pid_file = tmp_path / "pid"
    # the session says who it is as soon as pytest reads its conftest, before it collects: a busy
    # machine's 5 s must not run out before the pid is known
    forked.makeconftest(f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n")
    forked.makepyfile(
        test_slow="""
        import time

        def test_slow():
            time.sleep(120)
        """
    )
    with pytest.raises(forked.TimeoutExpired):
        forked.runpytest_subprocess("-p", "no:cacheprovider", "test_slow.py", timeout=5)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"the session (pid {pid}) outlived its timeout by 10 s")


def test_a_stand_in_module_first_on_pythonpath_gets_a_new_process(forked, monkeypatch, tmp_path):
    # the fork server imported peft before this test existed; a fork would keep that one
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "peft.py").write_text("STAND_IN = True\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "standin"), os.environ.get("PYTHONPATH")]))
    )
    forked.makepyfile(
        test_which="""
        import peft

        def test_which():
            assert getattr(peft, "STAND_IN", False), peft.__file__
        """
    )
    result = forked.runpytest_subprocess("-p", "no:cacheprovider", "test_which.py")
    result.assert_outcomes(passed=1)
