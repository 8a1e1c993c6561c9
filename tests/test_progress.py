"""The progress display: configuration k of N, where it is, the ETA; live on a terminal, lines
off it, quieter with -q, and pytest's own output left intact."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from llmbench_pytest.config.spec import RunSpec
from llmbench_pytest.session.eta import (
    OFFLOAD_FACTOR,
    OFFLOAD_SETUP_S,
    PRIOR_SHARE,
    START_S,
    WINDOW_BUDGET_SHARE,
    Eta,
    Planned,
    expected_seconds,
    start_kind,
)
from llmbench_pytest.session.progress import duration, where

SHORT = ("--llmbench-steps=3", "--llmbench-warmup=1")


def spec(**changes) -> RunSpec:
    base = RunSpec(
        strategy="ddp", model="llama-tiny", seq_len=128, per_device_batch=2, steps=10, warmup=2, dtype="fp32"
    )
    return base.replace(**changes)


def test_expected_cost_grows_with_the_work_and_with_offload():
    small = expected_seconds(spec())
    assert expected_seconds(spec(steps=100)) > small
    assert expected_seconds(spec(seq_len=512)) > small
    assert expected_seconds(spec(model="llama-125m")) > small
    zero2 = spec(strategy="zero2", device="cuda", model="llama-1b", seq_len=2048, dtype="bf16")
    steps_s = expected_seconds(zero2) - START_S["cuda"]["group"]
    offload = (
        expected_seconds(zero2.replace(offload="cpu")) - START_S["cuda"]["group"] - OFFLOAD_SETUP_S["cuda"]
    )
    assert offload == pytest.approx(OFFLOAD_FACTOR["cuda"]["cpu"] * steps_s)
    # a CPU's offload keeps its own factor and pins nothing
    cpu_steps_s = expected_seconds(spec()) - START_S["cpu"]["group"]
    cpu_offload = expected_seconds(spec(strategy="zero2", offload="cpu")) - START_S["cpu"]["group"]
    assert cpu_offload == pytest.approx(OFFLOAD_FACTOR["cpu"]["cpu"] * cpu_steps_s)
    assert expected_seconds(spec(), repeats=3) == pytest.approx(3 * small)


def test_an_adaptive_window_is_guessed_at_its_share_of_the_budget_within_its_steps():
    """A GPU window with a time budget: a quarter of it for a steady step, all of it for ZeRO-3's
    host-bound one, unless its minimum steps take longer or its step cap less (the guess of 100
    llama-1b steps was 31 s, where the window stops at the precision or at 20 s)."""
    gpu = spec(
        device="cuda", model="llama-1b", seq_len=2048, dtype="bf16", per_device_batch=8, steps=100, warmup=2
    )
    step_s = expected_seconds(gpu.replace(steps=10)) - expected_seconds(gpu.replace(steps=9))
    fixed = expected_seconds(gpu) - 100 * step_s
    budgeted = gpu.replace(min_steps=10, window_budget_s=20.0)
    assert expected_seconds(budgeted) == pytest.approx(fixed + WINDOW_BUDGET_SHARE["steady"] * 20.0)
    # ZeRO-3's host-bound steps run to the budget (same model and steps: the same fixed part)
    zero3 = budgeted.replace(strategy="zero3")
    ten_steps = zero3.replace(window_budget_s=0.0, steps=10, min_steps=0)
    assert expected_seconds(zero3) - expected_seconds(ten_steps) == pytest.approx(20.0 - 10 * step_s)
    # minimum steps longer than the share: the steps
    assert expected_seconds(gpu.replace(min_steps=40, window_budget_s=20.0)) == pytest.approx(
        fixed + 40 * step_s
    )
    # a cap shorter than the share: the cap
    assert expected_seconds(budgeted.replace(steps=12)) == pytest.approx(fixed + 12 * step_s)
    # a fixed step count (no minimum steps): its steps, whatever budget the spec carries
    assert expected_seconds(gpu.replace(window_budget_s=20.0)) == pytest.approx(fixed + 100 * step_s)


def test_an_epoch_window_is_guessed_at_its_budgets_share_not_at_one_step():
    """The encoder-decoder's window measures epochs while its mean is unknown (steps=1, no minimum
    steps): a quarter of the budget, where its steps alone guessed about a second."""
    encdec = spec(device="cuda", model="encdec-50m", workload="seq2seq", dtype="bf16", per_device_batch=64,
                  seq_len=256, steps=1, warmup=20)  # fmt: skip
    step_s = expected_seconds(encdec.replace(steps=2)) - expected_seconds(encdec)
    fixed = expected_seconds(encdec) - step_s
    budgeted = encdec.replace(max_epoch_steps=100, window_budget_s=20.0)
    assert 100 * step_s < WINDOW_BUDGET_SHARE["steady"] * 20.0
    assert expected_seconds(budgeted) == pytest.approx(fixed + WINDOW_BUDGET_SHARE["steady"] * 20.0)


def test_a_configuration_starts_as_the_sessions_first_a_new_groups_or_on_warm_ranks():
    """The session's first configuration pays the session's start, each world size's first (each
    lane's, side by side) a new group of ranks, the others warm ranks: on a CPU 5.6-6.2 s, 1.9-2.5 s
    and 0.3-2.3 s outside their steps (the README's first run, twice, 2026-11-28)."""
    seen: dict[int, int] = {}
    order = [spec(world_size=ws, strategy=s) for ws in (1, 2) for s in ("ddp", "fsdp", "zero2")]
    assert [start_kind(x, seen) for x in order] == ["session", "warm", "warm", "group", "warm", "warm"]
    seen = {}
    lanes = [start_kind(spec(strategy=s), seen, lanes=2) for s in ("ddp", "fsdp", "zero2", "zero3")]
    assert lanes == ["session", "group", "warm", "warm"]  # two lanes: two groups start
    steps = expected_seconds(spec(), start="warm") - START_S["cpu"]["warm"]
    for kind in ("session", "group"):
        assert expected_seconds(spec(), start=kind) == pytest.approx(START_S["cpu"][kind] + steps)
    assert START_S["cpu"]["session"] > START_S["cpu"]["group"] > START_S["cpu"]["warm"]


def test_the_readme_first_runs_first_eta_is_within_twice_its_length():
    """The README's first run (ddp, fsdp and zero2 on llama-tiny at one and two CPU ranks) ran its
    configurations in 17.2 to 19.2 s on the 2-core CPU VM (2026-11-27 and 28, four sessions): its
    first ETA must lie within half and twice that (it read 1:04 when every configuration was guessed
    at 10 s outside its steps)."""
    seen: dict[int, int] = {}
    order = [spec(world_size=ws, strategy=s, steps=12) for ws in (1, 2) for s in ("ddp", "fsdp", "zero2")]
    first = Eta({str(i): Planned(str(i), str(i), x.name, expected_seconds(x, 1, start_kind(x, seen)))
                 for i, x in enumerate(order)}).remaining_s(0.0)  # fmt: skip
    assert 19.2 / 2 <= first <= 2 * 17.2, first


def plan(*items: tuple[str, str, float]) -> Eta:
    return Eta({n: Planned(n, n, group, s) for n, group, s in items})


def test_eta_learns_from_finished_configurations_same_strategy_first():
    eta = plan(("a", "ddp", 10.0), ("b", "ddp", 20.0), ("c", "zero3_offload", 40.0))
    assert eta.remaining_s(now=0.0) == pytest.approx(70.0)  # the guesses, before anything ran
    eta.start("a", 0.0)
    eta.finish("a", 30.0)  # three times the guess
    # b (ddp) scales by 3; c (nothing of its own yet) by all finished ones, drawn towards 1 by the
    # prior: half the plan's 70 guessed seconds
    prior = PRIOR_SHARE * 70.0
    assert eta.remaining_s(now=30.0) == pytest.approx(3 * 20 + (30 + prior) / (10 + prior) * 40)
    eta.start("c", 30.0)
    eta.finish("c", 70.0)  # zero3_offload: exactly its guess; b still learns from a alone
    assert eta.remaining_s(now=70.0) == pytest.approx(60.0)
    eta.start("b", 70.0)
    assert eta.remaining_s(now=80.0) == pytest.approx(50.0)  # the running one counts down
    assert eta.place("b") == 3 and eta.place("zzz") is None


def test_a_few_quick_configurations_do_not_shrink_every_other_guess():
    """Two DDP runs that stopped at their precision in a quarter of their guess (a 2x H200 session:
    4 s against 16 s) leave ZeRO-3's guess nearer its own than a quarter of it; many runs of the
    same speed still move it (a machine truly faster than the guesses)."""
    eta = plan(
        *[(f"d{i}", "ddp", 16.0) for i in range(2)], ("z", "zero3", 30.0), ("o", "zero2_offload", 38.0)
    )
    for i in range(2):
        eta.start(f"d{i}", 4.0 * i)
        eta.finish(f"d{i}", 4.0 * (i + 1))
    left = eta.remaining_s(now=8.0)
    assert 0.6 * 68 < left < 68  # before the prior: a quarter, 17 s
    many = plan(*[(f"d{i}", "ddp", 16.0) for i in range(20)], ("z", "zero3", 30.0))
    for i in range(20):
        many.start(f"d{i}", 4.0 * i)
        many.finish(f"d{i}", 4.0 * (i + 1))
    # 80 s measured against 320 guessed, beside a prior of 175 s: 0.52 of ZeRO-3's guess
    assert many.remaining_s(now=80.0) == pytest.approx((80 + 175) / (320 + 175) * 30)


def test_eta_with_parallel_workers_and_failed_runs():
    eta = plan(("a", "ddp", 10.0), ("b", "ddp", 10.0), ("c", "ddp", 10.0), ("d", "ddp", 40.0))
    assert eta.remaining_s(now=0.0, workers=2) == pytest.approx(35.0)
    eta.start("d", 0.0)
    assert eta.remaining_s(now=0.0, workers=4) == pytest.approx(40.0)  # never less than the longest one
    eta.start("a", 0.0)
    eta.finish("a", 1.0, learn=False)  # a crash after a second says nothing about the others
    assert eta.remaining_s(now=1.0) == pytest.approx(20.0 + 39.0)
    assert 0 < eta.done_fraction(now=1.0) < 1


def test_where_reads_the_contract_and_tolerates_missing_keys():
    assert where({}) == ""
    assert where({"message": "warmup 2/2 loss 8.2"}) == "warmup 2/2 loss 8.2"
    event = {"phase": "measuring", "step": 12, "steps": 100, "precision": 0.013, "tokens_per_sec": 12345.6}
    assert where(event) == "measuring step 12/100 ±1.3% · 12,346 tokens/s"
    assert where({"phase": "building", "message": "built"}) == "building the model"
    assert where({"phase": "warmup", "step": 2}) == "warm-up step 2"
    assert duration(42) == "0:42" and duration(3723) == "1:02:03"


def run_lines(bench, *args: str) -> list[str]:
    """Run the benchmarks off a terminal (pytester's subprocess pipes) and return llmbench's lines."""
    result = bench.runpytest_subprocess("benchmarks", "--llmbench-world-sizes=1", *SHORT, *args)
    result.assert_outcomes(passed=2)
    return [ln for ln in result.outlines if ln.startswith("llmbench [")]


def test_off_a_terminal_one_line_per_configuration_start_and_end(bench):
    lines = run_lines(bench, "--llmbench-strategies=ddp,fsdp")
    assert len(lines) == 4, lines
    pattern = (
        r"llmbench \[(\d)/2\] test_pretrain\[(\w+)-ws1-seq128-llama-tiny\] "
        r"(started · \d+:\d\d elapsed|ok in \d+\.\d s, [\d,]+ tokens/s) · ETA \d+:\d\d$"
    )
    found = [re.match(pattern, ln) for ln in lines]
    assert all(found), lines
    assert [(m[1], m[2], m[3].split()[0]) for m in found] == [
        ("1", "ddp", "started"),
        ("1", "ddp", "ok"),
        ("2", "fsdp", "started"),
        ("2", "fsdp", "ok"),
    ]
    assert lines[-1].endswith("ETA 0:00")


@pytest.mark.parametrize(("flag", "kept"), [("-q", ["ok"]), ("-qq", [])])
def test_quieter_with_q(bench, flag, kept):
    # in-process: the same display, without starting torchrun groups
    result = bench.runpytest_subprocess(
        "benchmarks", "--llmbench-launch=inprocess", "--llmbench-strategies=ddp", *SHORT, flag
    )
    assert result.ret == 0  # -qq prints no outcome counts to parse
    lines = [ln for ln in result.outlines if ln.startswith("llmbench [")]
    assert [ln.split()[3] for ln in lines] == kept, lines


class Screen:
    """Just enough of a terminal to replay what pytest and the live region wrote: printable
    text, CR, LF, cursor up, cursor to column, erase in line and erase below."""

    CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: list[list[str]] = [[]]
        self.row = self.col = 0

    def _at(self, row: int) -> list[str]:
        while len(self.rows) <= row:
            self.rows.append([])
        return self.rows[row]

    def feed(self, text: str) -> None:
        pos = 0
        while pos < len(text):
            m = self.CSI.match(text, pos)
            if m:
                self._control(m[1], m[2])
                pos = m.end()
                continue
            ch = text[pos]
            pos += 1
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row += 1
            elif ch >= " ":
                if self.col >= self.width:  # pending wrap, as terminals do
                    self.row, self.col = self.row + 1, 0
                line = self._at(self.row)
                line.extend(" " * (self.col + 1 - len(line)))
                line[self.col] = ch
                self.col += 1

    def _control(self, args: str, code: str) -> None:
        n = int(args) if args.isdigit() else None
        line = self._at(self.row)
        if code == "A":
            self.row = max(self.row - (n or 1), 0)
        elif code == "G":
            self.col = (n or 1) - 1
        elif code == "K" and n in (None, 0, 2):
            del line[0 if n == 2 else self.col :]
        elif code == "J" and n in (None, 0):
            del line[self.col :]
            del self.rows[self.row + 1 :]

    def text(self) -> str:
        return "\n".join("".join(r).rstrip() for r in self.rows)


def run_in_pty(args: list[str], cwd: str, env: dict[str, str], width: int = 100) -> str:
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    os.close(master)
    return out.decode(errors="replace")


def test_on_a_terminal_a_live_display_that_leaves_pytests_output_intact(bench):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # the second configuration fails: its region must be gone before pytest prints the failure
    env.update(TERM="xterm-256color", COLUMNS="100", LINES="40", LLMBENCH_INJECT_FAULT="fsdp:error")
    args = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider"]
    args += ["--llmbench-strategies=ddp,fsdp", "--llmbench-world-sizes=1", *SHORT]
    raw = run_in_pty(args, str(bench.path), env)
    # the live region was drawn, with the configuration, the bar's weight and the ETA
    assert re.search(r"configuration 1 of 2 · \d+:\d\d elapsed · ETA \d+:\d\d", raw), raw[-3000:]
    assert "configuration 2 of 2" in raw
    assert "test_pretrain[fsdp-ws1-seq128-llama-tiny]" in raw
    screen = Screen(100)
    screen.feed(raw)
    final = screen.text()
    # ... and cleared: what stays on screen is pytest's own output, in its order
    assert "configuration 2 of 2" not in final and "elapsed · ETA" not in final, final
    assert re.search(r"^benchmarks/test_pretrain\.py \.F +\[100%\]$", final, re.M), final
    assert re.search(r"^=+ FAILURES =+$", final, re.M), final
    assert re.search(r"^E +Failed: fsdp error: rank 0: RuntimeError: injected failure", final, re.M), final
    assert re.search(r"^=+ 1 failed, 1 passed in .* =+$", final, re.M), final
    assert final.index("test session starts") < final.index("[100%]") < final.index("FAILURES")
