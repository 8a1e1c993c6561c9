"""Bad input: one clear error that names the fix, a usage-error exit code, no traceback."""

import pytest

from conftest import torchrun
from llmbench_pytest.config.options import SessionOptions
from llmbench_pytest.config.spec import SpecError

CASES = [
    (
        ["--llmbench-strategies=zero4"],
        "*--llmbench-strategies: unknown strategy 'zero4': choose from ddp, fsdp*",
    ),
    (
        ["--llmbench-strategies=ddp_offload"],
        "*ddp cannot offload to CPU. Strategies that can: zero1_offload*",
    ),
    (["--llmbench-model=llama-9b"], "*unknown model 'llama-9b': choose a preset (llama-tiny*"),
    (["--llmbench-steps=0"], "*--llmbench-steps: must be 1 or more; got 0*"),
    (["--llmbench-batch=-2"], "*--llmbench-batch: must be 1 or more; got -2*"),
    (["--llmbench-seq-lens=4096"], "*sequence length 4096 is longer than llama-tiny allows (512 positions)*"),
    (
        ["--llmbench-nvme-path=/no/such/dir"],
        "*--llmbench-nvme-path '/no/such/dir' is not a directory: create it*",
    ),
    (["--llmbench-device=tpu"], "*--llmbench-device: must be one of auto, cpu, cuda; got 'tpu'*"),
]


@pytest.mark.parametrize(
    ("args", "line"), CASES, ids=[c[0][0].split("=")[0][11:] + "-" + c[0][0].split("=")[1] for c in CASES]
)
def test_bad_option_is_one_clear_error(bench, args, line):
    result = bench.runpytest_subprocess("benchmarks", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_bad_ini_value_names_the_ini_key(bench):
    bench.makeini("[pytest]\nllmbench_dtype = bf8\n")
    result = bench.runpytest_subprocess("benchmarks")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*llmbench_dtype: must be one of auto, bf16, fp16, fp32; got 'bf8'*"])


def test_bad_marker_setting_names_the_test(bench):
    bench.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.llmbench(strategies="ddp", stpes=3)
        def test_marked(llmbench):
            llmbench.train()
        """
    )
    result = bench.runpytest_subprocess("test_marked.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*@pytest.mark.llmbench on test_marked.py::test_marked: unknown llmbench setting 'stpes'*"]
    )


def test_xdist_under_torchrun_is_refused(bench):
    result = torchrun(bench, 1, "benchmarks", "-n", "2", timeout=120)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*-n (pytest-xdist) cannot run under torchrun*Drop -n (or pass -n0)*"])


@pytest.mark.parametrize(("given", "shown"), [("200%", "200%"), ("1.5", "150%")])
def test_an_interval_wider_than_the_mean_is_refused_with_the_fix(given, shown):
    """--llmbench-max-interval above 100%: an interval that reaches below zero accepts any run."""
    with pytest.raises(SpecError) as refused:
        SessionOptions().with_values({"max_interval": given}, "command line")
    assert str(refused.value) == (
        f"--llmbench-max-interval: must be at most 1 (100 percent of the mean): an interval of +-{shown} "
        f"reaches below zero and accepts any run; got {given!r}: write 0.1 or 10%"
    )
    assert SessionOptions().with_values({"max_interval": "100%"}, "ini").max_interval == 1.0


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{a}"],
        ["scale", "{a}"],
        ["compare", "{a}", "{a}"],
        ["gate", "--baseline", "{a}", "--current", "{a}"],
    ],
    ids=["report", "scale", "compare", "gate"],
)
def test_an_archive_of_results_is_refused_in_one_line(tmp_path, command):
    """docs/results keeps sessions as .tgz files: given one, each command says to unpack it (it
    printed a UnicodeDecodeError's traceback, or "'utf-8' codec can't decode byte 0x8b")."""
    import subprocess
    import sys
    import tarfile

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "result.json").write_text("{}")
    archive = tmp_path / "runs.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "runs", arcname="runs")
    args = [a.replace("{a}", str(archive)) for a in command]
    out = subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *args], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "archive" in line and "tar xf" in line and "give the folder" in line, line
