"""The README documents every option the plugin has."""

from conftest import REPO
from llmbench_pytest.config.options import SETTINGS


def test_every_option_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    missing = [s.option for s in SETTINGS if s.option not in readme]
    assert not missing, f"README.md does not document {missing}"
