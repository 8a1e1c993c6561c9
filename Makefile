# The README's Quick start. Each target creates or reuses .venv, installs what is missing (torch's
# CUDA build where an NVIDIA GPU is, the CPU build otherwise), builds DeepSpeed's ops once and runs;
# tools/dev.sh does the work.
# Extra pytest arguments: make bench ARGS='-k zero2 --llmbench-world-sizes=1,2'
.PHONY: bench test setup

bench:  ## the default benchmarks with the report (results/latest/summary/BENCHMARK_REPORT.md)
	@bash tools/dev.sh bench $(ARGS)

test:  ## lint (ruff) and the plugin's own tests; what .ci/run runs
	@bash tools/dev.sh test $(ARGS)

setup:  ## create or update .venv and build DeepSpeed's ops (llmbench ops); run nothing
	@bash tools/dev.sh setup
