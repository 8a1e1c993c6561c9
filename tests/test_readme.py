"""The README documents every option the plugin has, and ships with it: `llmbench readme`."""

import subprocess
import sys

import pytest

from conftest import REPO
from llmbench_pytest import readme
from llmbench_pytest.config.options import SETTINGS


def test_every_option_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    missing = [s.option for s in SETTINGS if s.option not in readme]
    assert not missing, f"README.md does not document {missing}"


def _llmbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmbench_pytest.cli", *args], capture_output=True, text=True, check=False
    )


def test_llmbench_readme_prints_one_section_down_to_the_next_of_its_level():
    done = _llmbench("readme", "validation checks")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("## Validation checks\n")
    assert "llmbench.validate(result)" in done.stdout
    assert "\n## " not in done.stdout  # the next section is left out
    whole = _llmbench("readme").stdout
    assert whole == (REPO / "README.md").read_text() and done.stdout in whole


def test_an_unknown_section_is_refused_with_the_sections_there_are():
    done = _llmbench("readme", "no such section")
    assert done.returncode == 2 and done.stdout == ""
    assert "no section of the README is titled like 'no such section'" in done.stderr
    assert "  Quick start\n" in done.stderr and "  Validation checks\n" in done.stderr


def test_a_hash_line_in_a_code_block_is_not_a_heading():
    text = "# tool\n## Run\n```bash\n# a comment\nrun it\n```\n### Detail\nmore\n## Next\nother\n"
    assert readme.headings(text) == ["tool", "Run", "Detail", "Next"]
    assert readme.section(text, "run") == "## Run\n```bash\n# a comment\nrun it\n```\n### Detail\nmore\n"
    with pytest.raises(readme.ReadmeError, match="its sections:\n  tool\n  Run"):
        readme.section(text, "absent")
