"""--llmbench-profile keeps a trace and fills the communication block, on CPU too."""

import json


def test_profile_trace_and_measured_collectives_at_two_ranks(bench):
    result = bench.runpytest_subprocess(
        "benchmarks",
        "--llmbench-strategies=ddp,zero3",
        "--llmbench-world-sizes=2",
        "--llmbench-profile",
    )
    result.assert_outcomes(passed=2)
    for path in bench.path.glob("results/*_results/result.json"):
        run = json.loads(path.read_text())
        trace = json.loads((path.parent / "rank0.pt.trace.json").read_text())
        assert trace["traceEvents"], "the kept trace is a Chrome trace Perfetto and TensorBoard read"
        comm = run["communication"]
        assert comm["bus_bytes_per_step"] > 0 and comm["comm_sec_per_step"] > 0, run["strategy"]
        assert comm["collectives_per_step"] >= 1
        # measured model states next to the ZeRO paper's prediction (fp32 on CPU)
        assert abs(run["model_state_gap"]) < 0.25, (
            run["strategy"],
            run["model_state_gb"],
            run["model_state_predicted_gb"],
        )
