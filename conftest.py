# The plugin's own tests drive pytest in subprocesses with `pytester`; it must be enabled in the
# rootdir conftest (pytest refuses pytest_plugins in nested conftest files).
pytest_plugins = ["pytester"]
