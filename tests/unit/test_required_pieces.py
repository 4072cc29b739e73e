"""`skip_unless_required`: a missing piece of the machine skips a test, and fails it where its
AYCI_REQUIRE_* variable is set (scripts/test.sh sets them all, so CI never skips silently)."""

import pytest

from tests.conftest import REQUIRE, import_or_skip_unless_required, skip_unless_required


def test_a_missing_piece_skips_unless_its_variable_is_set(monkeypatch):
    monkeypatch.delenv("AYCI_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no browser"):
        skip_unless_required("AYCI_REQUIRE_CHROMIUM", "no browser")
    monkeypatch.setenv("AYCI_REQUIRE_CHROMIUM", "0")
    with pytest.raises(pytest.skip.Exception):
        skip_unless_required("AYCI_REQUIRE_CHROMIUM", "no browser")
    monkeypatch.setenv("AYCI_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no browser \(AYCI_REQUIRE_CHROMIUM is set\)"):
        skip_unless_required("AYCI_REQUIRE_CHROMIUM", "no browser")
    with pytest.raises(ValueError, match="unknown requirement"):
        skip_unless_required("AYCI_REQUIRE_CHROMUIM", "a typo never turns a requirement off")


def test_a_library_missing_skips_or_fails_and_one_present_is_imported(monkeypatch):
    monkeypatch.setenv("AYCI_REQUIRE_TRANSFORMERS", "1")
    with pytest.raises(pytest.fail.Exception, match="ayci_no_such_library is not installed"):
        import_or_skip_unless_required("ayci_no_such_library", "AYCI_REQUIRE_TRANSFORMERS")
    monkeypatch.delenv("AYCI_REQUIRE_TRANSFORMERS")
    with pytest.raises(pytest.skip.Exception):
        import_or_skip_unless_required("ayci_no_such_library", "AYCI_REQUIRE_TRANSFORMERS")
    assert import_or_skip_unless_required("json", "AYCI_REQUIRE_TRANSFORMERS").dumps([]) == "[]"


def test_ci_sets_every_requirement():
    from pathlib import Path

    script = (Path(__file__).resolve().parents[2] / "scripts" / "test.sh").read_text()
    assert [v for v in REQUIRE if f"export {v}=1" not in script] == []
